"""The RL host loop: select → rollout → score → credit → update, with eval, checkpoints, logs.

`train(config, workdir)` runs (or resumes) the experiment of a config from
`rlvr_jax.rl.config` and returns its final evaluation. Per RL step, `run`
calls the five stages by name:

  1. select ↔ rollout (`Trainer.selector.step(key, rollout=Trainer.rollout)`):
     the scheduler of `select.name` (`rl.select`; uniform, DAPO dynamic
     sampling, SARA, PAIR, ...) proposes prompts and rollout counts round by
     round; the rollout plug-in of `rollout.name` (`rlvr_jax.rollout`)
     generates and verifies them. The result is a fixed-shape batch of B·G rows
     (padding rows masked out); the scheduler's state is checkpointed.
  2. score (`Trainer.score`): the typed `Batch` (`rl.batch`) with the old
     log-probs (the rollout's behaviour log-probs μ, or recomputed by the
     trainer), reference log-probs (KL), the score signals, the KL penalty in
     the reward and the critic's values.
  3. credit (`Trainer.credit`): the advantage estimator and token transforms.
  4. update (`Trainer.update`): `train.ppo_epochs` passes, each split into
     `train.num_minibatches` optimizer updates (rows shuffled per pass), with
     gradient accumulation over micro-batches of `train.micro_batch_size`
     rows; each update's metrics are read after the next one is dispatched.

Everything random derives from `config.seed` and the step number, and the
prompt iterator's position is checkpointed with the train state, so a resumed
run repeats an uninterrupted one exactly. SIGTERM saves a checkpoint and stops;
a non-finite loss, and after every update a non-finite or exploded parameter or
gradient norm (`run.guard`, bounds in `config.guard`), stop the run before
anything is saved (the last checkpoint stays the last good one).

Multi-process runs (one process per host, `rlvr_jax.distributed`; our design):
every process reads its own shard of the prompts, `data.prompts_per_step / P`
prompts per step for P processes, and samples, verifies and builds its own rows.
Every jitted program (sampler, scorers, update) runs once over all hosts' rows:
host rows become global arrays with `distributed.host_local_to_global` (global
batch = every process's rows, concatenated), and the host reads back only its
own rows (`distributed.host_rows`). All processes agree on the shapes they feed
(row count and context bucket in the sampler, the trimmed width here) by taking
the largest. Groups never cross processes, so rewards, signals and advantages
are computed on each host's rows; an estimator or transform that normalises over
the whole batch (e.g. REINFORCE++ whitening) therefore normalises over the
host's rows, not the global batch. An update's minibatch k is every process's
k-th slice of its own shuffled rows, so with `train.num_minibatches` > 1 the
minibatches differ from a one-process run's (a different random split);
losses and other update metrics come from the global minibatch. Rollout and
select statistics are summed over processes (means from global sums; counts add
up); timings are process 0's. Dynamic sampling's rounds run in step on every
process (`scheduling.Lockstep`): a host that has its B groups idles, repeating its
last rollout, while another still samples. A scheduler that keeps per-prompt
statistics of a pool (difficulty, SARA, VIGOR, PAIR, LEEPS, the graph estimator)
runs on every process over the global budget and sees every host's outcomes
(`rl.select_hosts`): the hosts sample slices of each round and train on disjoint
shares of one selection. GRSD's guidance calls and MOPD's per-domain teachers are
joined by every process, with padding rows where a host has fewer or none.
Evaluation splits its problems over processes and gathers the per-problem results
(`distributed.process_shard` / `gather_shards`): single-turn samples, multi-turn
episodes and the task's own games (SpyRL vs the frozen policy); process 0 logs them.
LSPO's lora_scaffold fits one adapter on every host's cliff prompts. A loaded teacher
(score.teacher) is sharded on the policy's mesh and scores each process's own rows,
like the policy's scorer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.core.losses import kl_in_reward
from rlvr_jax.data.pipeline import prompt_batches
from rlvr_jax.data.sources import TaskSource
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import build, credit, signals
from rlvr_jax.rl.batch import Batch
from rlvr_jax.rl.config import transform_names, validate
from rlvr_jax.rl.critic import Critic, calibration_metrics
from rlvr_jax.rl.select import COUNT_STATS, Select
from rlvr_jax.rl.update import RLState, build_optimizer, make_scorer, make_update, make_value_fn
from rlvr_jax.rollout import EVALUATORS, ROLLOUTS, Groups, Request, RolloutContext
from rlvr_jax.rollout.groups import LABEL_FIELDS
from rlvr_jax.run.guard import param_health
from rlvr_jax.run.run_io import RunIO
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.multiturn import evaluate_episodes

log = logging.getLogger(__name__)

# Training rows are trimmed to their used columns, rounded up to this: few shapes, few compiles.
_LENGTH_MULTIPLE = 32


def _check_processes(c: ml_collections.ConfigDict, mesh) -> None:
    """Raises (naming the config field) for what a multi-process run cannot split."""
    n = jax.process_count()
    if n == 1:
        return
    distributed.check_rows_split(mesh)
    d = c.data
    if d.prompts_per_step % n or (d.prompts_per_step // n * d.group_size) % c.train.num_minibatches:
        raise ValueError(
            f"config.data.prompts_per_step = {d.prompts_per_step} over {n} processes: each "
            f"needs an equal share whose rows (x group_size = {d.group_size}) split into "
            f"config.train.num_minibatches = {c.train.num_minibatches}"
        )


class Trainer:
    """One RL run: the models, the jitted programs and the host state between steps."""

    def __init__(
        self, config: ml_collections.ConfigDict, workdir: str | Path, allow_config_change=()
    ):
        validate(config)
        self.c = c = config
        self.io = RunIO(workdir, config, allow_config_change=allow_config_change)
        # Every model, state and jitted program below lives on this mesh (config.mesh).
        self.mesh, self.rules = build.build_mesh(c), c.mesh.rules
        _check_processes(c, self.mesh)
        self.processes = jax.process_count()
        self.model, self.tokenizer = build.build_policy(c)
        nnx.update(self.model, sharding.shard_state(nnx.state(self.model), self.mesh, self.rules))
        self.task = build.build_task(c)
        self.pad_id = self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0
        self.sampler = Sampler(
            self.model,
            pad_id=self.pad_id,
            mesh=self.mesh,
            rules=self.rules,
            cache_bytes=c.rollout.cache_gib * 2**30 or None,
            cache_dtype=c.rollout.cache_dtype or None,
        )
        self.sampling = SamplingParams(
            temperature=c.rollout.temperature,
            top_p=c.rollout.top_p,
            top_k=c.rollout.top_k,
            max_new_tokens=c.rollout.max_new_tokens,
            stop_token_ids=self.tokenizer.stop_ids,
        )
        self.prompts = prompt_batches(
            TaskSource(self.task, c.task.train_split, size=c.task.train_size),
            batch_size=c.data.prompts_per_step // self.processes,  # this process's share
            seed=c.seed,
            group_size=c.data.group_size,
        )
        self.rollout_cache: dict[str, Any] = {}  # what the rollout plug-in builds once
        # The frozen opponent of a task's own evaluation (SpyRL's games): the initial policy.
        self.frozen_state = None
        if c.task.name in EVALUATORS:
            self.frozen_state = jax.tree.map(jnp.copy, nnx.state(self.model))
        # The scheduler, built from the initial weights (its prompt embeddings).
        self.selector = Select(
            c, self.model, self.tokenizer, self.task, self.prompts, self.pad_id, self.processes,
            mesh=self.mesh,
        )  # fmt: skip
        graphdef, params, self.rest = nnx.split(self.model, nnx.Param, ...)
        mesh_kw = dict(mesh=self.mesh, rules=self.rules)
        scorer = distributed.on_host_rows(make_scorer(graphdef, **mesh_kw), self.mesh)
        cfg, chunk = self.model.config, self._chunk()
        policy = signals.Scorer(scorer, graphdef, params, self.rest, cfg, chunk)
        # The reference policy for KL: the initial weights, frozen.
        reference = None
        if c.loss.kl_coef > 0 or c.loss.kl_reward_coef > 0:
            reference = dataclasses.replace(policy, params=jax.tree.map(jnp.copy, params))
        domain = c.model.domain if c.model.source == "warm_start" else ""
        self.score_ctx = signals.ScoreContext(
            self.tokenizer, self.task, policy, reference, self.mesh, self.rules, domain
        )
        optimizer = build.policy_optimizer(c)
        critic_params = critic_opt = critic_graphdef = critic_optimizer = None
        self.critic_rest = None
        if c.critic.enabled:
            trunk = nnx.merge(graphdef, jax.tree.map(jnp.copy, params), self.rest)
            cc = c.critic  # the head: scalar ("mse") or categorical ("hl_gauss")
            head = dict(loss=cc.loss, num_bins=cc.num_bins, v_min=cc.v_min, v_max=cc.v_max)
            critic_graphdef, critic_params, self.critic_rest = nnx.split(
                Critic(trunk, seed=c.seed, **head), nnx.Param, ...
            )
            o = c.optimizer
            critic_optimizer = build_optimizer(
                c.critic.lr, build.total_updates(c), b1=o.b1, b2=o.b2, clip_norm=o.clip_norm
            )
            critic_opt = critic_optimizer.init(critic_params)
            self.critic_rest = sharding.shard_state(self.critic_rest, self.mesh, self.rules)
            value_fn = make_value_fn(critic_graphdef, **mesh_kw)
            self.value_fn = distributed.on_host_rows(value_fn, self.mesh)
        constant = c.loss.constant or c.rollout.max_new_tokens  # per non-empty row
        kw = dict(
            constant=constant,
            critic_graphdef=critic_graphdef,
            critic_optimizer=critic_optimizer,
            value_clip=c.critic.value_clip,
            critic_sigma_ratio=c.critic.sigma_ratio,
            loss_consts=_loss_consts(c),
            **mesh_kw,
        )
        spec = build.loss_spec(c)
        self.update_fn = make_update(graphdef, optimizer, spec, **kw)
        self.update_critic_only = (
            make_update(graphdef, optimizer, spec, train_policy=False, **kw)
            if c.critic.enabled and c.critic.warmup_steps
            else None
        )
        state = RLState(
            params=jax.tree.map(jnp.copy, params),
            opt_state=optimizer.init(params),
            critic_params=critic_params,
            critic_opt_state=critic_opt,
            step=jnp.zeros((), jnp.int32),
            rng=jax.random.PRNGKey(c.seed),
        )
        self.state = sharding.shard_rl_state(state, self.mesh, self.rules)

    def _chunk(self) -> int:
        """This process's rows per micro-batch (its share of `train.micro_batch_size`)."""
        rows = self.c.data.prompts_per_step * self.c.data.group_size // self.c.train.num_minibatches
        return (self.c.train.micro_batch_size or rows) // jax.process_count()

    def _sync_model(self) -> None:
        """Points the sampler's model at the current weights (copies: the update donates)."""
        nnx.update(self.model, jax.tree.map(jnp.copy, self.state.params))

    # ------------------------------------------------------------------ stages
    def rollout(self, request: Request, key: jax.Array) -> Groups:
        """The rollout stage: the configured plug-in generates and scores `request`'s rows."""
        c = self.c
        ctx = RolloutContext(
            self.sampler,
            self.tokenizer,
            self.task,
            nnx.state(self.model),
            self.sampling,
            key,
            request,
            overlong_cache=c.reward.overlong_cache,
            overlong_penalty=c.reward.overlong_penalty,
            cache=self.rollout_cache,
        )
        return ROLLOUTS.get(c.rollout.name).fn(ctx, **c.rollout[c.rollout.name].to_dict())

    def trimmed(self, groups: Groups, multiple: int = _LENGTH_MULTIPLE) -> Groups:
        """`groups` trimmed to the columns any process uses (a collective): one width on
        every process, as the update is one program over all hosts' rows."""
        span = groups.used_span() or (0, groups.tokens.shape[1])
        lo, hi = distributed.max_over_processes(np.array([-span[0], span[1]]))
        return groups.trim(multiple, span=(-int(lo), int(hi)))

    def score(self, groups: Groups, fields: dict[str, np.ndarray], step: int) -> Batch:
        """The score stage: the batch of `groups` with log-probs, signals, shaped rewards, values.

        Args:
          groups: the selected rows; fields: the scheduler's per-row fields.
          step: the RL step (0-based).
        """
        c = self.c
        g = self.trimmed(groups)
        mask = g.response_mask & g.valid[:, None]
        if c.reward.mask_truncated:
            mask &= g.stopped[:, None]
        ctx = self.score_ctx.with_policy(params=self.state.params)
        ctx.step_cache.clear()
        ctx.metrics.clear()
        args = (g.tokens, g.attention_mask)
        old = g.behaviour_logps
        if c.loss.recompute_old_logps:
            old = np.where(mask, ctx.policy.logps(*args), 0.0).astype(np.float32)
        batch = batch_lib.from_groups(g, mask, old, fields)
        if ctx.reference is not None:
            ref = np.where(mask, ctx.reference.logps(*args), 0.0).astype(np.float32)
            batch = batch.replace(ref_logps_BxT=ref)
        names = signals.signal_names(c)
        batch = signals.compute(ctx, g, batch, names, {n: c.score[n].to_dict() for n in names})
        rewards = batch.rewards_B
        if c.loss.kl_reward_coef:  # r − β Σ_t KL_t, the estimator of loss.kl_kind
            rewards = kl_in_reward(
                rewards,
                batch.old_logps_BxT,
                batch.ref_logps_BxT,
                mask,
                beta=c.loss.kl_reward_coef,
                kind=c.loss.kl_kind,
                k3_cap=c.loss.kl_clamp,
            )
        batch = batch.replace(rewards_B=np.asarray(rewards, np.float32))
        if c.critic.enabled:
            critic = (self.state.critic_params, self.critic_rest)
            values = signals.map_row_chunks(self.value_fn, critic, args, chunk=self._chunk())
            batch = batch.replace(old_values_BxT=np.where(mask, values, 0.0).astype(np.float32))
            ctx.metrics.update(  # Brier score / ECE of the critic, every step
                calibration_metrics(
                    values,
                    mask,
                    g.correct,
                    loss=c.critic.loss,
                    v_min=c.critic.v_min,
                    v_max=c.critic.v_max,
                )
            )
        return batch

    def credit(self, batch: Batch, step: int, num_groups: int) -> Batch:
        """The credit stage: the configured estimator and token transforms (adv_BxT)."""
        c = self.c
        names = transform_names(c)
        hparams = {n: c.credit[n].to_dict() for n in [c.credit.name, *names]}
        return credit.assign(
            batch,
            estimator=c.credit.name,
            hparams=hparams,
            transforms=names,
            step=step,
            num_groups=num_groups,
        )

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """The update stage: ppo_epochs × num_minibatches updates; the step's averaged metrics.

        Each update is dispatched before the previous one's metrics are read, so
        the host never waits on the device between updates.
        """
        c = self.c
        rows = batch.rows()
        n_rows = len(rows.tokens_BxT)
        per_mb = n_rows // c.train.num_minibatches
        micro = self._chunk()
        mb_sharding = sharding.batch_sharding(self.mesh, batch_dim=1)
        update = self.update_fn
        if self.update_critic_only is not None and step < c.critic.warmup_steps:
            update = self.update_critic_only
        totals: dict[str, float] = {}
        pending, n_updates = None, 0

        def check_and_add(metrics, k):
            metrics = jax.device_get(metrics)
            health = metrics.pop("health")
            # Before anything of this step can be saved: parameters and grad norm sane.
            self.io.check_update(None, metrics, step + 1, k, health=health)
            for key, v in metrics.items():
                totals[key] = totals.get(key, 0.0) + float(v)

        for epoch in range(c.train.ppo_epochs):
            rng = np.random.default_rng([c.seed, step, epoch])
            perm = rng.permutation(n_rows)
            for k in range(c.train.num_minibatches):
                idx = perm[k * per_mb : (k + 1) * per_mb]
                shape = (per_mb // micro, micro)
                mb = jax.tree.map(lambda x, i=idx, s=shape: x[i].reshape(s + x.shape[1:]), rows)
                # Global micro-batch i: every process's micro-batch i, concatenated.
                mb = distributed.host_local_to_global(mb, self.mesh, mb_sharding)
                self.state, metrics = update(self.state, self.rest, self.critic_rest, mb)
                # Parameter health is dispatched with the update and read with its metrics.
                params = {"policy": self.state.params, "critic": self.state.critic_params}
                metrics = dict(metrics, health=param_health(params))
                if pending is not None:
                    check_and_add(*pending)
                pending, n_updates = (metrics, n_updates), n_updates + 1
        check_and_add(*pending)
        out = {k: v / n_updates for k, v in totals.items() if not k.startswith("sum/")}
        tokens = max(totals.get("sum/tokens", 0.0), 1.0)
        for k, v in totals.items():
            name = k.removeprefix("sum/")
            if name == k or name == "tokens" or name.startswith("tokens@"):
                continue
            if "@" in name:  # a fraction over a subset of the tokens, counted by tokens@subset
                count = totals.get("sum/tokens@" + name.split("@", 1)[1], 0.0)
                if count:
                    out[name] = v / count
                continue
            out[name if name != "ratio" else "ratio_mean"] = v / tokens
        for name in ("clip_low", "clip_high", "dual_clip"):
            if name in out:
                out[f"{name}_frac"] = out.pop(name)
        return out

    # ---------------------------------------------------------------- evaluate
    def evaluate(self) -> dict[str, Any]:
        """Held-out pass@1 / pass@n / avg@n of the current policy, and the task's own
        evaluation against the initial policy where it has one (`rollout.EVALUATORS`)."""
        c = self.c
        self._sync_model()
        kw = dict(
            split=c.eval.split,
            num_problems=c.eval.num_problems,
            n_samples=c.eval.n_samples,
            temperature=c.eval.temperature,
            max_new_tokens=c.rollout.max_new_tokens,
            seed=c.seed + 1,
        )
        if self.task.episode_turns():  # a multi-turn task is evaluated on whole episodes
            turns = self.task.episode_turns()
            kw.update(env_factory=self.task.env, max_turns=turns)
            res = evaluate_episodes(
                self.model, self.tokenizer, self.task, split_processes=True, **kw
            )
        else:
            # Each process samples its share of the problems; all get the whole result.
            res = evaluate_task(self.model, self.tokenizer, self.task, split_processes=True, **kw)
        n = c.eval.n_samples
        out = {k: res[k] for k in res if k.startswith("pass@")}
        out[f"avg@{n}"] = float(np.mean(res["num_correct"]) / n)
        out["mean_reward"] = res["mean_reward"]
        out["mean_response_tokens"] = res["mean_response_tokens"]
        out.update(res["task_metrics"])  # e.g. Countdown's coverage, entrance entropy
        if c.task.name in EVALUATORS:  # e.g. "who is the spy" games vs the initial policy
            problems = self.task.problems(c.eval.num_problems, c.eval.split)
            params = SamplingParams(
                temperature=c.eval.temperature,
                max_new_tokens=c.rollout.max_new_tokens,
                stop_token_ids=self.tokenizer.stop_ids,
            )
            key = jax.random.PRNGKey(c.seed + 2)
            out.update(
                EVALUATORS[c.task.name](
                    self.sampler,
                    self.tokenizer,
                    problems,
                    params,
                    key,
                    self.frozen_state,
                    split_processes=True,
                )
            )
        return out

    # --------------------------------------------------------------------- run
    def run(self, stop_rule: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Trains to `train.steps` (resuming from the workdir) and returns the final eval.

        Args:
          stop_rule: optional `stop_rule() -> bool` (e.g. a validation plateau that
            ends a pipeline stage), asked once the run has started or resumed and
            after each evaluation; it reads what it needs itself (the run's
            metrics.jsonl, whose evaluations up to now it then holds). True ends
            training at that step as if it were `train.steps`: a checkpoint, the
            final evaluation and the export follow. Single-process runs only.
        """
        c = self.c
        if stop_rule is not None and self.processes > 1:
            raise NotImplementedError("Trainer.run(stop_rule=...) is single-process only")
        self.state, start = self.io.restore(self.state, self.prompts)
        if start:
            self.selector.state = self.io.restore_scheduler(start, self.selector.state)
        if start == 0 and c.eval.at_start:
            self.io.log_eval(0, self.evaluate())
        step = start
        ended = stop_rule is not None and stop_rule()
        last_eval = (-1, {})
        with self.io.preemption() as guard:
            while step < c.train.steps and not ended:
                t0 = time.perf_counter()
                self._sync_model()
                key = jax.random.fold_in(self.state.rng, step)
                groups, stats, fields = self.selector.step(key, rollout=self.rollout)
                stats = _combine_select_stats(stats)
                t1 = time.perf_counter()
                batch = self.score(groups, fields, step)
                stats.update(self.score_ctx.metrics)  # the signals' diagnostics
                batch = self.credit(batch, step, groups.num_groups)
                if distributed.agree(groups.valid.any()):  # all hosts update, or none
                    stats.update(self.update(batch, step))
                else:
                    log.warning("step %d: no informative group; no update", step)
                self.state = self.state.replace(step=self.state.step + 1)
                step += 1
                t2 = time.perf_counter()
                stats.update(_rollout_stats(groups, self.sampling.max_new_tokens))
                stats.update(_info_stats(groups))
                tokens = float(
                    distributed.sum_over_processes(groups.attention_mask[groups.valid].sum())
                )
                stats.update(
                    rollout_seconds=t1 - t0,
                    update_seconds=t2 - t1,
                    step_seconds=t2 - t0,
                    tokens_per_s=tokens / max(t2 - t0, 1e-9),
                )
                if "loss" in stats and not np.isfinite(stats["loss"]):
                    raise FloatingPointError(
                        f"loss is {stats['loss']} at step {step}; stopping. "
                        + self.io.resume_hint()
                    )
                self.io.log_train(step, c.train.steps, stats)
                if c.eval.every and step % c.eval.every == 0 and step < c.train.steps:
                    last_eval = (step, self.evaluate())
                    self.io.log_eval(*last_eval)
                    ended = stop_rule is not None and stop_rule()
                # A preemption signal may reach only some hosts: all stop at the same step.
                stop = distributed.agree(guard.requested)
                if step % c.checkpoint.every == 0 or step == c.train.steps or stop or ended:
                    self.io.save(step, self.state, self.prompts, stats, self.selector.state)
                if stop:
                    by = guard.signal_name or "another process's signal"
                    log.warning("%s received: checkpoint saved at step %d", by, step)
                    return {"preempted": True, "step": step}
        if ended and last_eval[0] == step:
            final = last_eval[1]  # the rule ended the run right after this evaluation
        else:
            final = self.evaluate()
            self.io.log_eval(step, final)
        self.io.finish(self.model if c.checkpoint.export_final else None, self.tokenizer)
        return final


def _loss_consts(c) -> dict:
    """Run constants of the policy loss: an external teacher's output kernel (opd_full_kl)."""
    from rlvr_jax.rl import objectives
    from rlvr_jax.rl.methods import teacher_dists

    if "teacher_kernel_DxV" not in objectives.POLICY_LOSSES.get(c.loss.name).requires:
        return {}
    kernel = teacher_dists.teacher_output_kernel(c)
    return {} if kernel is None else {"teacher_kernel_DxV": kernel}


def _combine_select_stats(stats: dict[str, float]) -> dict[str, float]:
    """The select stage's statistics over every process's groups.

    Counts (`select.COUNT_STATS`) add up; the rest (reward, pass_rate, rounds) are
    means over equally many rows per process (each samples its equal share of
    prompts), so their mean over processes is the global mean.
    """
    if jax.process_count() == 1:
        return stats
    keys = sorted(stats)
    total = distributed.sum_over_processes(np.array([stats[k] for k in keys], np.float64))
    n = jax.process_count()
    return {k: float(v if k in COUNT_STATS else v / n) for k, v in zip(keys, total, strict=True)}


def _rollout_stats(groups: Groups, max_new_tokens: int) -> dict[str, float]:
    """Response length, truncation, entropy over the valid rows of every process."""
    valid = groups.valid
    lengths = groups.lengths[valid]
    ent = groups.entropy[valid][groups.response_mask[valid]]
    local = [
        lengths.size,
        lengths.sum(),
        (~groups.stopped[valid]).sum(),
        (lengths >= max_new_tokens).sum(),
        ent.size,
        ent.sum(dtype=np.float64),
    ]
    rows, length, truncated, at_max, tokens, ent_sum = distributed.sum_over_processes(
        np.array(local, np.float64)
    )
    return {
        "response_len": float(length / rows) if rows else 0.0,
        "truncated_frac": float(truncated / rows) if rows else 0.0,
        "entropy": float(ent_sum / tokens) if tokens else 0.0,
        "max_len_frac": float(at_max / rows) if rows else 0.0,
    }


def _info_stats(groups: Groups) -> dict[str, float]:
    """The rollout plug-in's per-row reports (`Groups.info`) over every process's valid rows.

    A bool field `x_B` gives rollout/x (share of rows), rollout/x_groups (groups
    with such a row) and the reward / pass rate of its rows and of the others
    (rollout/x_reward, rollout/x_pass_rate, rollout/not_x_reward,
    rollout/not_x_pass_rate); another field gives its mean over the rows where it
    is finite (rollout/turns; CBPO's branches_per_root_B is NaN on branch rows).
    Row labels (`groups.LABEL_FIELDS`: branch ids, sub-group ids) give nothing.
    """
    v = groups.valid
    out = {}
    for name, values in sorted(groups.info.items()):
        if name in LABEL_FIELDS:
            continue
        key = "rollout/" + name.removesuffix("_B")
        x = np.asarray(values)[v]
        if x.ndim != 1:  # not one number per row (e.g. GRSD's guidance_ids_BxN)
            continue
        if x.dtype != bool:  # the mean over the rows it applies to (NaN elsewhere)
            x = x[np.isfinite(x)]
            n, s = distributed.sum_over_processes(np.array([x.size, x.sum()], np.float64))
            out[key] = float(s / n) if n else 0.0
            continue
        r, ok = groups.rewards[v], groups.correct[v]
        grp = np.unique(groups.group[v][x])
        local = [x.size, x.sum(), grp.size, r[x].sum(), ok[x].sum(), r[~x].sum(), ok[~x].sum()]
        rows, n, n_groups, r1, ok1, r0, ok0 = distributed.sum_over_processes(
            np.array(local, np.float64)
        )
        out.update({key: float(n / rows) if rows else 0.0, key + "_groups": float(n_groups)})
        for prefix, count, rs, oks in (("", n, r1, ok1), ("not_", rows - n, r0, ok0)):
            k = "rollout/" + prefix + name.removesuffix("_B")
            out.update({k + "_reward": float(rs / count) if count else 0.0})
            out.update({k + "_pass_rate": float(oks / count) if count else 0.0})
    return out


def train(
    config: ml_collections.ConfigDict, workdir: str | Path, allow_config_change=()
) -> dict[str, Any]:
    """Runs (or resumes) the RL experiment of `config` in `workdir`; returns the final eval.

    `allow_config_change` names config fields a resume may change (`run_io.RunIO`);
    a run stopped by SIGTERM returns {"preempted": True, "step": ...}.
    """
    trainer = Trainer(config, workdir, allow_config_change)
    try:
        return trainer.run()
    finally:
        trainer.io.close()


def summary_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=True)
