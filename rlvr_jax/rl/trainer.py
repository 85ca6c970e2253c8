"""The RL host loop: select → rollout → score → credit → update, with eval, checkpoints, logs.

`train(config, workdir)` runs (or resumes) the experiment of a config from
`rlvr_jax.rl.config` and returns its final evaluation. The run is built first
(`rl.parts.build_parts`: models, tokenizer, task, prompts, sampler, scheduler,
scorers, critic, initial state), then run by `Trainer(parts, steps)`, whose
score, credit and update stages are `rl.steps.RLSteps` (DPO's are
`pipeline.dpo.DPOSteps`, in the same loop). Per RL step, `run` calls the five
stages by name:

  1. select ↔ rollout (`parts.selector.step(key, rollout=Trainer.rollout)`):
     the scheduler of `select.name` (`scheduling.select`; uniform, DAPO dynamic
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
     rows; each update's metrics are read after the next one is dispatched,
     and reduced over the step by `rl.step_metrics.reduce_update_metrics`.

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
(`scheduling.select_hosts`): the hosts sample slices of each round and train on disjoint
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

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax import distributed
from rlvr_jax import eval as suite_eval
from rlvr_jax.rl.parts import Parts, build_parts, rollout_context, rollout_stage
from rlvr_jax.rl.step_metrics import combine_select_stats, info_stats, rollout_stats
from rlvr_jax.rl.steps import RLSteps
from rlvr_jax.rl.update import RLState
from rlvr_jax.rollout import EVALUATORS, Groups, Request, RolloutContext
from rlvr_jax.sampling import SamplingParams
from rlvr_jax.train.eval_checkpoint import run_eval_settings
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.multiturn import evaluate_episodes

log = logging.getLogger(__name__)


class Steps(Protocol):
    """A trainer kind's score, credit and update stages (`rl.steps.RLSteps`, DPO's)."""

    def score(self, state: RLState, groups: Groups, fields: dict, step: int) -> Any: ...

    def credit(self, batch: Any, step: int, num_groups: int) -> Any: ...

    def update(self, state: RLState, batch: Any, step: int) -> tuple[RLState, dict]: ...


class Trainer:
    """Runs an RL run's parts: the select ↔ rollout, score, credit and update loop.

    Args:
      parts: what the run is built from (`rl.parts.build_parts`).
      steps: the score, credit and update stages (default `rl.steps.RLSteps(parts)`).
    Attributes:
      parts, steps: as given; c: the config; io: the run directory;
      state: the current train state (the parts' initial one until `run` restores
        a checkpoint over it).
    """

    def __init__(self, parts: Parts, steps: Steps | None = None):
        self.parts = parts
        self.c = parts.config
        self.io = parts.io
        self.state = parts.state
        self.steps = steps if steps is not None else RLSteps(parts)

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, workdir: str | Path, allow_config_change=()
    ) -> Trainer:
        """The RL trainer of `config` in `workdir` (`build_parts`, then `RLSteps`)."""
        return cls(build_parts(config, workdir, allow_config_change))

    def _sync_model(self) -> None:
        """Points the sampler's model at the current weights (copies: the update donates)."""
        nnx.update(self.parts.model, jax.tree.map(jnp.copy, self.state.params))

    # ------------------------------------------------------------------ stages
    def rollout(self, request: Request, key: jax.Array, *, sampler=None) -> Groups:
        """The rollout stage: the configured plug-in generates and scores `request`'s rows.

        `sampler` (default the run's) samples with its own model's weights: the
        asynchronous rollout worker passes its sampler of an older policy version.
        """
        return rollout_stage(self.parts, request, key, sampler)

    def rollout_context(self, request: Request, key: jax.Array, *, sampler=None) -> RolloutContext:
        """What the rollout plug-in gets: `sampler` (default the run's) and its model's state."""
        return rollout_context(self.parts, request, key, sampler)

    def score(self, groups: Groups, fields: dict[str, np.ndarray], step: int):
        """The score stage on the current state (`Steps.score`)."""
        return self.steps.score(self.state, groups, fields, step)

    def credit(self, batch, step: int, num_groups: int):
        """The credit stage (`Steps.credit`)."""
        return self.steps.credit(batch, step, num_groups)

    def update(self, batch, step: int) -> dict[str, float]:
        """The update stage: advances the state; the step's metrics (`Steps.update`)."""
        self.state, metrics = self.steps.update(self.state, batch, step)
        return metrics

    # ---------------------------------------------------------------- evaluate
    def evaluate(self, split: str = "", num_problems: int = 0) -> dict[str, Any]:
        """Held-out pass@1 / pass@n / avg@n of the current policy, and the task's own
        evaluation against the initial policy where it has one (`rollout.EVALUATORS`),
        on `split` / `num_problems` (default: `eval.split` / `eval.num_problems`)."""
        c, p = self.c, self.parts
        self._sync_model()
        # One source of the settings for this and scripts/evaluate.py on the run's export.
        kw = run_eval_settings(json.loads(c.to_json()))
        kw.update(split=split or kw["split"], num_problems=num_problems or kw["num_problems"])
        split, num_problems = kw["split"], kw["num_problems"]
        if p.task.episode_turns():  # a multi-turn task is evaluated on whole episodes
            turns = p.task.episode_turns()
            kw.update(env_factory=p.task.env, max_turns=turns)
            res = evaluate_episodes(p.model, p.tokenizer, p.task, split_processes=True, **kw)
        else:
            # Each process samples its share of the problems; all get the whole result.
            res = evaluate_task(p.model, p.tokenizer, p.task, split_processes=True, **kw)
        n = c.eval.n_samples
        out = {k: res[k] for k in res if k.startswith("pass@")}
        out[f"avg@{n}"] = float(np.mean(res["num_correct"]) / n)
        out["mean_reward"] = res["mean_reward"]
        out["mean_response_tokens"] = res["mean_response_tokens"]
        out.update(res["task_metrics"])  # e.g. Countdown's coverage, entrance entropy
        if c.eval.suite and split == c.eval.split and self._suite_due():
            out.update(self.evaluate_suite())  # the paper's benchmarks (rlvr_jax.eval)
        if c.task.name in EVALUATORS:  # e.g. "who is the spy" games vs the initial policy
            problems = p.task.problems(num_problems, split)
            params = SamplingParams(
                temperature=c.eval.temperature,
                max_new_tokens=c.rollout.max_new_tokens,
                stop_token_ids=p.tokenizer.stop_ids,
            )
            key = jax.random.PRNGKey(c.seed + 2)
            out.update(
                EVALUATORS[c.task.name](
                    p.sampler,
                    p.tokenizer,
                    problems,
                    params,
                    key,
                    p.frozen_state,
                    split_processes=True,
                )
            )
        return out

    def _suite_due(self) -> bool:
        """Whether this step's evaluation includes eval.suite (`eval.suite_every`)."""
        every, step = self.c.eval.suite_every, int(self.state.step)
        return not every or step % every == 0 or step >= self.c.train.steps

    def evaluate_suite(self) -> dict[str, float]:
        """The current policy on `eval.suite`'s benchmarks: {suite/<bench>/<metric>: value}."""
        c, p = self.c, self.parts
        settings = suite_eval.Settings(
            n_samples=c.eval.suite_n_samples,
            ks=tuple(int(k) for k in c.eval.suite_ks.split(",")),
            temperature=c.eval.temperature,
            max_new_tokens=c.eval.suite_max_new_tokens or c.rollout.max_new_tokens,
            seed=c.seed + 3,
            num_problems=c.eval.suite_num_problems or None,
            # The paged engine samples on one device; a policy on a larger mesh uses the
            # static sampler (one call per problem).
            engine="paged" if p.mesh is None or p.mesh.size == 1 else "static",
        )
        step = int(self.state.step)
        res = suite_eval.run_suite(
            p.model,
            p.tokenizer,
            c.eval.suite,
            c.eval.suite_data,
            settings,
            model_id=f"{self.io.workdir}@{step}",
            cache_dir=str(self.io.workdir / "eval_suite" / c.eval.suite),
            show_progress=False,
            split_processes=True,  # each process samples its share (`run_suite`)
        )
        out = {}
        for bench, r in res["benchmarks"].items():
            out.update({f"suite/{bench}/{m}": v["value"] for m, v in r["metrics"].items()})
        out.update({f"suite/average/{m}": v["value"] for m, v in res["average"].items()})
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
        c, p = self.c, self.parts
        if c.async_rl.max_staleness:  # rollouts overlap the update (rl.async_loop)
            from rlvr_jax.rl.async_loop import RolloutWorker, run_async
            from rlvr_jax.rl.async_process import ProcessWorker

            worker = ProcessWorker if c.async_rl.worker == "process" else RolloutWorker
            return run_async(self, stop_rule, worker)
        if stop_rule is not None and p.processes > 1:
            raise NotImplementedError("Trainer.run(stop_rule=...) is single-process only")
        self.state, start = self.io.restore(self.state, p.prompts)
        if start:
            p.selector.state = self.io.restore_scheduler(start, p.selector.state)
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
                groups, stats, fields = p.selector.step(key, rollout=self.rollout)
                stats = combine_select_stats(stats)
                t1 = time.perf_counter()
                stats.update(self.learn(groups, fields, step))
                step += 1
                self.log_step(step, groups, stats, rollout_seconds=t1 - t0, t0=t0, t1=t1)
                if c.eval.every and step % c.eval.every == 0 and step < c.train.steps:
                    last_eval = (step, self.evaluate())
                    self.io.log_eval(*last_eval)
                    ended = stop_rule is not None and stop_rule()
                # A preemption signal may reach only some hosts: all stop at the same step.
                stop = distributed.agree(guard.requested)
                if step % c.checkpoint.every == 0 or step == c.train.steps or stop or ended:
                    self.io.save(step, self.state, p.prompts, stats, p.selector.state)
                if stop:
                    by = guard.signal_name or "another process's signal"
                    log.warning("%s received: checkpoint saved at step %d", by, step)
                    return {"preempted": True, "step": step}
        return self.finish(step, last_eval if ended else (-1, {}))

    # ------------------------------------------------------- the step's parts
    def learn(self, groups, fields, step: int, batch_stats=None) -> dict[str, float]:
        """Scores, credits and (when a group is informative) updates on step `step`'s groups.

        Args:
          groups, fields: the select stage's output for the step.
          step: the step being trained (the state's step is advanced by one).
          batch_stats: optional `batch_stats(batch) -> dict`, asked on the scored batch
            (the asynchronous loop's behaviour-ratio stats).
        Returns:
          the signals' diagnostics, `batch_stats`'s and the update's stats.
        """
        p = self.parts
        batch = self.score(groups, fields, step)
        stats = dict(p.score_ctx.metrics)  # the signals' diagnostics
        if batch_stats is not None:
            stats.update(batch_stats(batch))
        batch = self.credit(batch, step, groups.num_groups)
        if distributed.agree(groups.valid.any()):  # all hosts update, or none
            stats.update(self.update(batch, step))
        else:
            log.warning("step %d: no informative group; no update", step)
        self.state = self.state.replace(step=self.state.step + 1)
        return stats

    def log_step(self, step: int, groups, stats, *, rollout_seconds, t0, t1) -> None:
        """Adds the rollout, info and timing stats to `stats` and logs them as step `step`.

        `t0` is the step's start and `t1` the end of its wait for rollouts; a
        non-finite loss stops the run with the resume hint.
        """
        p = self.parts
        t2 = time.perf_counter()
        stats.update(rollout_stats(groups, p.sampling.max_new_tokens))
        stats.update(info_stats(groups))
        tokens = float(distributed.sum_over_processes(groups.attention_mask[groups.valid].sum()))
        stats.update(
            rollout_seconds=rollout_seconds,
            update_seconds=t2 - t1,
            step_seconds=t2 - t0,
            tokens_per_s=tokens / max(t2 - t0, 1e-9),
        )
        if "loss" in stats and not np.isfinite(stats["loss"]):
            raise FloatingPointError(
                f"loss is {stats['loss']} at step {step}; stopping. " + self.io.resume_hint()
            )
        self.io.log_train(step, self.c.train.steps, stats)

    def finish(self, step: int, last_eval=(-1, {})) -> dict[str, Any]:
        """The final evaluation (reusing `last_eval` = (step, eval) if it is this step's),
        the validation split, the export; returns the final evaluation."""
        c, p = self.c, self.parts
        final = last_eval[1] if last_eval[0] == step else self.evaluate()
        if c.eval.validation_problems:  # for choosing hyperparameters (repro sweeps)
            val = self.evaluate("validation", c.eval.validation_problems)
            final = final | {f"val/{k}": v for k, v in val.items()}
        if final is not last_eval[1]:  # a step logged twice keeps its last record
            self.io.log_eval(step, final)
        self.io.finish(p.model if c.checkpoint.export_final else None, p.tokenizer)
        return final


def train(
    config: ml_collections.ConfigDict, workdir: str | Path, allow_config_change=()
) -> dict[str, Any]:
    """Runs (or resumes) the RL experiment of `config` in `workdir`; returns the final eval.

    `allow_config_change` names config fields a resume may change (`run_io.RunIO`);
    a run stopped by SIGTERM returns {"preempted": True, "step": ...}.
    """
    trainer = Trainer.from_config(config, workdir, allow_config_change)
    try:
        return trainer.run()
    finally:
        trainer.io.close()


def summary_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=True)
