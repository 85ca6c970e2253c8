"""The RL host loop: select → rollout → score → credit → update, with eval, checkpoints, logs.

`train(config, workdir)` runs (or resumes) the experiment of a config from
`rlvr_jax.rl.config` and returns its final evaluation. Per RL step:

  1. select/rollout/score: sample G rollouts for each of B prompts and verify
     them (`select.collect_groups`; DAPO dynamic sampling refills), giving a
     fixed-shape batch (padding rows are masked out). A stateful scheduler
     (`select.name` in `scheduled.SCHEDULED`: SARA, VIGOR, PAIR, LEEPS, ...)
     runs its select↔rollout rounds instead (`scheduled.ScheduledSelect`); its
     state is checkpointed with the run.
  2. reference log-probs (KL), critic values (PPO) and, if configured, the old
     log-probs recomputed by the trainer (else the sampler's are used: they
     equal teacher forcing to ~1e-6).
  3. credit: the configured advantage estimator.
  4. update: `train.ppo_epochs` passes, each split into `train.num_minibatches`
     optimizer updates (rows shuffled per pass), with gradient accumulation over
     micro-batches of `train.micro_batch_size` rows.

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
up); timings are process 0's. Evaluation runs on every process over the same
problems (each host samples its own copy of the rows; process 0's are the rows a
one-process run samples) and process 0 logs its result. Not yet multi-process:
schedulers (`scheduled.SCHEDULED`) and dynamic sampling with several rounds
(hosts would stop sampling at different rounds), which raise; score signals
that call models other than through `Trainer.scorer` (e.g. a teacher's scorer).
"""

from __future__ import annotations

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
from rlvr_jax.data.pipeline import prompt_batches
from rlvr_jax.data.sources import TaskSource
from rlvr_jax.rl import build, credit, scheduled, select, signals
from rlvr_jax.rl.config import transform_names, validate
from rlvr_jax.rl.critic import Critic, calibration_metrics
from rlvr_jax.rl.rollout import Groups, sample_groups
from rlvr_jax.rl.update import RLState, build_optimizer, make_scorer, make_update, make_value_fn
from rlvr_jax.run.run_io import RunIO
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.train.evaluate import evaluate_task

log = logging.getLogger(__name__)

# Training rows are trimmed to their used columns, rounded up to this: few shapes, few compiles.
_LENGTH_MULTIPLE = 32


def _chunked(fn, *args, rows: int, chunk: int):
    """fn(*args, x[i:i+chunk], ...) over row chunks of the trailing arrays, concatenated."""
    *fixed, tokens, mask = args
    outs = [fn(*fixed, tokens[i : i + chunk], mask[i : i + chunk]) for i in range(0, rows, chunk)]
    return np.concatenate([np.asarray(o) for o in outs])


def _on_host_rows(fn, mesh):
    """`fn(params, rest, tokens_BxT, mask_BxT)` taking and returning this process's rows.

    The host rows become one global batch (every process's rows, concatenated);
    the [B, T] result comes back as this process's rows, in NumPy.
    """

    def call(params, rest, tokens_BxT, mask_BxT):
        rows = distributed.host_local_to_global((tokens_BxT, mask_BxT), mesh)
        return distributed.host_rows(fn(params, rest, *rows))

    return call


def _check_processes(c: ml_collections.ConfigDict, mesh, scheduled_select: bool) -> None:
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
    # These stop sampling on host-local conditions, so hosts would sample different
    # numbers of times; they need a cross-process agreement on when to stop.
    if scheduled_select or (c.select.name == "dynamic_sampling" and c.select.max_rounds > 1):
        raise NotImplementedError(
            f"config.select.name = {c.select.name!r} (max_rounds = {c.select.max_rounds}) "
            f"is not supported with {n} processes yet; use 'uniform' or max_rounds = 1"
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
        _check_processes(c, self.mesh, c.select.name in scheduled.SCHEDULED)
        self.processes = jax.process_count()
        self.model, self.tokenizer = build.build_policy(c)
        nnx.update(self.model, sharding.shard_state(nnx.state(self.model), self.mesh, self.rules))
        self.task = build.build_task(c)
        self.spec = build.loss_spec(c)
        self.pad_id = self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0
        self.sampler = Sampler(self.model, pad_id=self.pad_id, mesh=self.mesh, rules=self.rules)
        self.sampling = SamplingParams(
            temperature=c.rollout.temperature,
            top_p=c.rollout.top_p,
            top_k=c.rollout.top_k,
            max_new_tokens=c.rollout.max_new_tokens,
            stop_token_ids=self.tokenizer.stop_ids,
            n=c.data.group_size,
        )
        self.prompts = prompt_batches(
            TaskSource(self.task, c.task.train_split, size=c.task.train_size),
            batch_size=c.data.prompts_per_step // self.processes,  # this process's share
            seed=c.seed,
            group_size=c.data.group_size,
        )
        # A stateful scheduler, built from the initial weights (its prompt embeddings).
        self.sched = None
        if c.select.name in scheduled.SCHEDULED:
            self.sched = scheduled.ScheduledSelect(
                c, self.model, self.tokenizer, self.task, self.sampler, self.pad_id
            )
        # Extra batch fields of the current step (the scheduler's, e.g. PAIR's π).
        self._step_fields: dict[str, np.ndarray] = {}
        self.score_ctx = signals.ScoreContext(config=c, trainer=self)
        graphdef, params, self.rest = nnx.split(self.model, nnx.Param, ...)
        mesh_kw = dict(mesh=self.mesh, rules=self.rules)
        self.scorer = _on_host_rows(make_scorer(graphdef, **mesh_kw), self.mesh)
        # The reference policy for KL: the initial weights, frozen.
        uses_ref = c.loss.kl_coef > 0 or c.loss.kl_reward_coef > 0
        self.ref_params = jax.tree.map(jnp.copy, params) if uses_ref else None
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
            self.value_fn = _on_host_rows(make_value_fn(critic_graphdef, **mesh_kw), self.mesh)
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
        self.update = make_update(graphdef, optimizer, self.spec, **kw)
        self.update_critic_only = (
            make_update(graphdef, optimizer, self.spec, train_policy=False, **kw)
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

    # ------------------------------------------------------------------ stages
    def _sync_model(self) -> None:
        """Points the sampler's model at the current weights (copies: the update donates)."""
        nnx.update(self.model, jax.tree.map(jnp.copy, self.state.params))

    def _draw(self, key):
        def draw(r: int) -> Groups:
            batch = next(self.prompts)
            return sample_groups(
                self.sampler,
                self.tokenizer,
                self.task,
                batch,
                self.sampling,
                jax.random.fold_in(key, r),
                overlong_cache=self.c.reward.overlong_cache,
                overlong_penalty=self.c.reward.overlong_penalty,
            )

        return draw

    def _batch(self, groups: Groups) -> dict[str, np.ndarray]:
        """Host arrays of the training batch: masks, log-probs, rewards, advantages."""
        c = self.c
        # One width on every process: the update is one program over all hosts' rows.
        span = groups.used_span() or (0, groups.tokens.shape[1])
        lo, hi = distributed.max_over_processes(np.array([-span[0], span[1]]))
        g = groups.trim(_LENGTH_MULTIPLE, span=(-int(lo), int(hi)))
        mask = g.response_mask & g.valid[:, None]
        if c.reward.mask_truncated:
            mask &= g.stopped[:, None]
        b = {
            "tokens_BxT": g.tokens,
            "attention_mask_BxT": g.attention_mask,
            "mask_BxT": mask,
            "rollout_logps_BxT": g.logps,
        }
        rows, chunk = len(g.tokens), self._chunk()
        args = (g.tokens, g.attention_mask)
        if c.loss.recompute_old_logps:
            old = _chunked(self.scorer, self.state.params, self.rest, *args, rows=rows, chunk=chunk)
            b["old_logps_BxT"] = np.where(mask, old, 0.0).astype(np.float32)
        else:
            b["old_logps_BxT"] = g.logps
        if self.ref_params is not None:
            ref = _chunked(self.scorer, self.ref_params, self.rest, *args, rows=rows, chunk=chunk)
            b["ref_logps_BxT"] = np.where(mask, ref, 0.0).astype(np.float32)
        # Score-stage signals (teacher log-probs, first mistakes, ...; `rl.signals`).
        b.update(entropy_BxT=g.entropy, rewards_B=g.rewards, correct_B=g.correct)
        b.update(group_B=g.group, valid_B=g.valid, step=int(self.state.step))
        b.update(self._step_fields)
        b.update(signals.compute(self.score_ctx, g, b))
        rewards = b.pop("rewards_B")
        if c.loss.kl_reward_coef:
            kl_B = np.sum(np.where(mask, b["old_logps_BxT"] - b["ref_logps_BxT"], 0.0), -1)
            rewards = rewards - c.loss.kl_reward_coef * kl_B
        values = None
        if c.critic.enabled:
            values = _chunked(
                self.value_fn,
                self.state.critic_params,
                self.critic_rest,
                *args,
                rows=rows,
                chunk=chunk,
            )
            b["old_values_BxT"] = np.where(mask, values, 0.0).astype(np.float32)
            self.score_ctx.metrics.update(  # Brier score / ECE of the critic, every step
                calibration_metrics(
                    values,
                    mask,
                    g.correct,
                    loss=c.critic.loss,
                    v_min=c.critic.v_min,
                    v_max=c.critic.v_max,
                )
            )
        entry = credit.ESTIMATORS.get(c.credit.name)
        adv, returns = entry.fn(
            rewards,
            g.group,
            g.valid,
            mask,
            num_groups=g.num_groups,
            values_BxT=values,
            **c.credit[c.credit.name].to_dict(),
        )
        names = transform_names(c)
        if names:
            # `step`: the RL step, for transforms with schedules (SAF-OPD's warm-up/anneal).
            fields = dict(b, rewards_B=rewards)
            hparams = {n: c.credit[n].to_dict() for n in names}
            adv = credit.apply_transforms(names, adv, fields, hparams)
        b["adv_BxT"] = np.asarray(adv, np.float32)
        if returns is not None:
            b["returns_BxT"] = np.asarray(returns, np.float32)
        b["rewards_B"] = rewards.astype(np.float32)
        del b["step"]  # not a row field: the update's minibatches hold only _BxT / _B arrays
        return b

    def _chunk(self) -> int:
        """This process's rows per micro-batch (its share of `train.micro_batch_size`)."""
        rows = self.c.data.prompts_per_step * self.c.data.group_size // self.c.train.num_minibatches
        return (self.c.train.micro_batch_size or rows) // self.processes

    def _optimize(self, b: dict[str, np.ndarray], step: int) -> dict[str, float]:
        """ppo_epochs × num_minibatches updates; returns the step's averaged metrics."""
        c = self.c
        rows = len(b["tokens_BxT"])
        per_mb = rows // c.train.num_minibatches
        micro = self._chunk()
        fields = [k for k in b if k.endswith(("_BxT", "_B", "_BxTxD", "_BxTxK"))]
        mb_sharding = sharding.batch_sharding(self.mesh, batch_dim=1)
        update = self.update
        if self.update_critic_only is not None and step < c.critic.warmup_steps:
            update = self.update_critic_only
        totals: dict[str, float] = {}
        n_updates = 0
        for epoch in range(c.train.ppo_epochs):
            rng = np.random.default_rng([c.seed, step, epoch])
            perm = rng.permutation(rows)
            for k in range(c.train.num_minibatches):
                idx = perm[k * per_mb : (k + 1) * per_mb]
                shape = (per_mb // micro, micro)
                mb = {f: b[f][idx].reshape(shape + b[f].shape[1:]) for f in fields}
                # Global micro-batch i: every process's micro-batch i, concatenated.
                mb = distributed.host_local_to_global(mb, self.mesh, mb_sharding)
                self.state, metrics = update(self.state, self.rest, self.critic_rest, mb)
                metrics = jax.device_get(metrics)
                # Before anything of this step can be saved: parameters and grad norm sane.
                self.io.check_update(self.state, metrics, step + 1, n_updates)
                for key, v in metrics.items():
                    totals[key] = totals.get(key, 0.0) + float(v)
                n_updates += 1
        out = {k: v / n_updates for k, v in totals.items() if not k.startswith("sum/")}
        tokens = max(totals.get("sum/tokens", 0.0), 1.0)
        for k, v in totals.items():
            if k.startswith("sum/") and k != "sum/tokens":
                out[k[4:] if k != "sum/ratio" else "ratio_mean"] = v / tokens
        for name in ("clip_low", "clip_high", "dual_clip"):
            if name in out:
                out[f"{name}_frac"] = out.pop(name)
        return out

    # ---------------------------------------------------------------- evaluate
    def evaluate(self) -> dict[str, Any]:
        """Held-out pass@1 / pass@n / avg@n of the current policy."""
        c = self.c
        self._sync_model()
        res = evaluate_task(
            self.model,
            self.tokenizer,
            self.task,
            split=c.eval.split,
            num_problems=c.eval.num_problems,
            n_samples=c.eval.n_samples,
            temperature=c.eval.temperature,
            max_new_tokens=c.rollout.max_new_tokens,
            seed=c.seed + 1,
        )
        n = c.eval.n_samples
        out = {k: res[k] for k in res if k.startswith("pass@")}
        out[f"avg@{n}"] = float(np.mean(res["num_correct"]) / n)
        out["mean_reward"] = res["mean_reward"]
        out["mean_response_tokens"] = res["mean_response_tokens"]
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
        if self.sched is not None and start:
            self.sched.state = self.io.restore_scheduler(start, self.sched.state)
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
                if self.sched is None:
                    groups, stats = select.collect_groups(
                        self._draw(key),
                        num_groups=c.data.prompts_per_step // self.processes,
                        group_size=c.data.group_size,
                        mode=c.select.name,
                        max_rounds=c.select.max_rounds,
                    )
                else:
                    groups, stats, self._step_fields = self.sched.step(key)
                stats = _combine_select_stats(stats)
                t1 = time.perf_counter()
                batch = self._batch(groups)
                stats.update(self.score_ctx.metrics)  # the signals' diagnostics
                if distributed.agree(groups.valid.any()):  # all hosts update, or none
                    stats.update(self._optimize(batch, step))
                else:
                    log.warning("step %d: no informative group; no update", step)
                self.state = self.state.replace(step=self.state.step + 1)
                step += 1
                t2 = time.perf_counter()
                stats.update(_rollout_stats(groups, self.sampling.max_new_tokens))
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
                    sched_state = None if self.sched is None else self.sched.state
                    self.io.save(step, self.state, self.prompts, stats, sched_state)
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

    Counts add up; the rest (reward, pass_rate, zero_variance_groups, rounds) are
    means over equally many rows per process (each samples its equal share of
    prompts), so their mean over processes is the global mean.
    """
    if jax.process_count() == 1:
        return stats
    keys = sorted(stats)
    total = distributed.sum_over_processes(np.array([stats[k] for k in keys], np.float64))
    n = jax.process_count()
    return {
        k: float(v if k in ("sampled_groups", "kept_groups") else v / n)
        for k, v in zip(keys, total, strict=True)
    }


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
