"""Asynchronous RL: rollouts of later steps are sampled while the learner updates.

`async_rl.max_staleness` = k > 0 switches `Trainer.run` to `run_async`. The
schedule is fixed, so a run is deterministic whatever the threads' timing:

  step t trains on groups sampled by policy version v(t) = max(v0, t − k),

where version v is the policy at the start of step v (after v updates) and v0
is the step the run started or resumed at. A rollout worker (a thread with its
own copy of the model and its own sampler, `RolloutWorker`) runs the select and
rollout stages of step t as soon as version v(t) is published; the learner
(this thread) runs score, credit and update of step t on the worker's groups
and publishes version t + 1. With k = 1 the rollouts of step t + 1 run during
step t's update (one-step-off); with k = 2 the worker may run two steps ahead.
Every row of step t carries staleness t − v(t); tokens are not mixed across
versions (a row is sampled by one version: no partial rollouts yet).

The learner's π_old is the current policy when `loss.recompute_old_logps` is set
(the proximal policy of decoupled PPO); μ is the worker's log-prob of each token
(`behaviour_logps`); `loss.rollout_correction` weights the loss by π_old / μ
(`core.rollout_correction`), and the ratio's statistics are logged every step
(`is/*`). Without recomputation π_old = μ: the PPO ratio is taken against the
stale behaviour policy itself.

What the stages see: the select stage (uniform or DAPO dynamic sampling; others
are refused by `validate`) runs in the worker and sees the outcomes of its own
rows, sampled by version v(t); score signals, teachers, critics and credit run
in the learner at step t on the current policy (a self-teacher or critic is the
step-t model, not the one that sampled). Evaluation runs in the learner on the
current policy while the worker samples.

Checkpoints and resume (the in-flight rule): a checkpoint at step s is taken
after the worker has finished the groups of steps s … s + k − 1 (they need only
versions < s, all published) and before version s is published, so the worker
is stopped at a step boundary. Those groups are saved beside the checkpoint
(`async_inflight/<s>.pkl`) together with the scheduler state and prompt
position after them; a resume loads them and the worker continues at s + k
with version s, so a resumed run repeats the uninterrupted one exactly, and no
group is trained twice or lost. Steps past the old `train.steps` of an extended
run have no saved groups: they are sampled by version s (less stale than the
schedule), with a warning.

Where the worker runs (`async_rl.worker`): "thread" (`RolloutWorker`, default) is a
thread of this process, on the learner's devices or on its own local device
(`async_rl.rollout_device`); "process" (`rl.async_process.ProcessWorker`) is its
own OS process with its own interpreter and XLA thread pool, optionally pinned to
`async_rl.worker_cpus`, to which each version's weights are sent as host arrays,
and which sends back each step's groups with its scheduler state and prompt
position (the learner's copies follow them, so the in-flight rule above holds).
The schedule and keys are the same, so both give the same run.

One learner process only: a multi-process run with k > 0 is refused (the hosts'
workers would need a lock-step of their own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import distributed
from rlvr_jax.core.rollout_correction import correction_stats
from rlvr_jax.rl.async_partial import partial_rollout
from rlvr_jax.rl.parts import make_sampler
from rlvr_jax.rl.step_metrics import combine_select_stats
from rlvr_jax.rollout import Groups

log = logging.getLogger(__name__)

INFLIGHT_DIR = "async_inflight"


@dataclasses.dataclass
class Produced:
    """One step's groups from the rollout worker.

    Attributes:
      step: the RL step they train; version: the policy version that sampled them.
      groups, stats, fields: the select stage's output (`Select.step`).
      rollout_seconds: the worker's time sampling them (the push included);
        wait_seconds: its idle time before, waiting for `version` to be published;
        push_seconds: copying the weights to the rollout device (disaggregated), or
          to the worker's process (host copy, pickle, pipe, device_put).
    """

    step: int
    version: int
    groups: Groups
    stats: dict[str, Any]
    fields: dict[str, np.ndarray]
    rollout_seconds: float = 0.0
    wait_seconds: float = 0.0
    push_seconds: float = 0.0


class Closed(Exception):
    """The learner stopped: the worker ends."""


class Versions:
    """Policy versions the learner publishes; the worker waits for the one it needs."""

    def __init__(self):
        self._cond = threading.Condition()
        self._params: dict[int, Any] = {}
        self._closed = False

    def publish(self, version: int, params, keep: int) -> None:
        """Adds `version` (a copy of `params`) and drops versions below version − keep."""
        copy = jax.tree.map(jnp.copy, params)  # the update donates its input buffers
        with self._cond:
            self._params[version] = copy
            for v in [v for v in self._params if v < version - keep]:
                del self._params[v]
            self._cond.notify_all()

    def wait(self, version: int):
        """The parameters of `version`, blocking until published; Closed once closed."""
        with self._cond:
            while version not in self._params and not self._closed:
                self._cond.wait()
            if self._closed:
                raise Closed()
            return self._params[version]

    def newest(self) -> tuple[int, Any]:
        """(version, parameters) of the newest published version (partial rollouts)."""
        with self._cond:
            version = max(self._params)
            return version, self._params[version]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def rollout_device(index: int, mesh):
    """The worker's own device (`async_rl.rollout_device` = index >= 0), or None (-1)."""
    if index < 0:
        return None
    local = jax.local_devices()
    if index >= len(local):
        raise ValueError(
            f"config.async_rl.rollout_device = {index}, but this process has {len(local)} "
            "device(s) (on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count=2)"
        )
    device = local[index]
    if device in set(mesh.devices.flat):
        raise ValueError(
            f"config.async_rl.rollout_device = {index} is a device of the learner's mesh "
            f"(config.mesh.shape = {tuple(mesh.devices.shape)}): give the worker another one"
        )
    return device


def version_of(step: int, k: int, first_version: int) -> int:
    """The policy version that samples step `step`'s groups: max(first_version, step − k)."""
    return max(first_version, step - k)


class RolloutWorker(threading.Thread):
    """Runs the select and rollout stages of steps [first, last) on published versions.

    Args:
      trainer: the `rl.trainer.Trainer` (its selector, rollout stage and parts).
      k: the staleness bound; first_version: the version the run (re)started at.
      first, last: the steps to produce; preloaded: saved groups of in-flight
        steps (a resume), handed out without sampling.
      versions: where the learner publishes policy versions.
    """

    def __init__(self, trainer, k: int, first_version: int, first: int, last: int, versions,
                 preloaded: dict[int, Produced] | None = None):  # fmt: skip
        super().__init__(name="rlvr-rollout-worker", daemon=True)
        p = trainer.parts
        self.trainer, self.k, self.first_version = trainer, k, first_version
        self.first, self.last, self.versions = first, last, versions
        self.rng = np.asarray(trainer.state.rng)  # a host copy: the update donates the state
        self.device = rollout_device(p.config.async_rl.rollout_device, p.mesh)
        self.model = nnx.clone(p.model)  # the worker samples with its own copy
        mesh = p.mesh
        if self.device is not None:  # disaggregated: its own device, outside the mesh
            nnx.update(self.model, jax.device_put(nnx.state(self.model), self.device))
            mesh = None
        self.sampler, _ = make_sampler(p.config, self.model, p.tokenizer, p.pad_id, mesh)
        self._cond = threading.Condition()
        self._done: dict[int, Produced] = dict(preloaded or {})
        self._error: BaseException | None = None
        self.produced_through = max(self._done, default=first - 1)

    def run(self) -> None:
        try:
            for step in range(self.first, self.last):
                if step in self._done:
                    continue
                self._publish(self._produce(step))
        except Closed:
            pass
        except BaseException as e:  # handed to the learner, which re-raises it
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _produce(self, step: int) -> Produced:
        version = version_of(step, self.k, self.first_version)
        t0 = time.perf_counter()
        params = self.versions.wait(version)
        t1 = time.perf_counter()
        push = 0.0
        if self.device is not None:  # the weights pushed to the rollout device
            params = jax.block_until_ready(jax.device_put(params, self.device))
            push = time.perf_counter() - t1
        nnx.update(self.model, params)
        key = jax.random.fold_in(self.rng, step)  # as the synchronous step's key
        with contextlib.nullcontext() if self.device is None else jax.default_device(self.device):
            groups, stats, fields = self.trainer.parts.selector.step(
                key, rollout=self._rollout(step)
            )
        t2 = time.perf_counter()
        return Produced(step, version, groups, stats, fields, t2 - t1, t1 - t0, push)

    def _rollout(self, step: int) -> Callable:
        """The rollout stage the select stage calls for step `step` (on the worker's sampler)."""
        c, trainer = self.trainer.c, self.trainer
        if c.async_rl.partial_rollouts == "off":
            return lambda request, key: trainer.rollout(request, key, sampler=self.sampler)

        def partial(request, key):
            ctx = trainer.rollout_context(request, key, sampler=self.sampler)
            return partial_rollout(
                ctx,
                self.model,
                step=step,
                k=self.k,
                segment=c.async_rl.segment_tokens,
                mode=c.async_rl.partial_rollouts,
                newest=self.versions.newest,
            )

        return partial

    def _publish(self, produced: Produced) -> None:
        with self._cond:
            self._done[produced.step] = produced
            self.produced_through = produced.step
            self._cond.notify_all()

    def _wait_for(self, ready: Callable[[], bool]) -> None:
        with self._cond:
            while not ready() and self._error is None:
                self._cond.wait(timeout=1.0)
            if self._error is not None:
                raise RuntimeError("the rollout worker failed") from self._error

    def get(self, step: int) -> Produced:
        """Step `step`'s groups (blocks until produced), removed from the worker."""
        self._wait_for(lambda: step in self._done)
        with self._cond:
            return self._done.pop(step)

    def pending_through(self, step: int) -> list[Produced]:
        """The produced groups of every step up to `step` not yet handed out (blocks)."""
        self._wait_for(lambda: self.produced_through >= step)
        with self._cond:
            return [self._done[s] for s in sorted(self._done) if s <= step]


# ------------------------------------------------------------------ in-flight files
def inflight_path(io, step: int):
    return io.paths.workdir / INFLIGHT_DIR / f"{step}.pkl"


def save_inflight(io, step: int, produced: list[Produced]) -> None:
    """Writes the in-flight groups of checkpoint `step` (atomically: tmp, then rename)."""
    path = inflight_path(io, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_bytes(pickle.dumps(produced, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.rename(path)


def load_inflight(io, step: int) -> dict[int, Produced]:
    """The in-flight groups saved with checkpoint `step` (the run's own files)."""
    path = inflight_path(io, step)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: checkpoint {step} of an asynchronous run "
            "(async_rl.max_staleness > 0) has no in-flight rollouts. Was it saved by a "
            "synchronous run? Resume it with async_rl.max_staleness = 0."
        )
    return {p.step: p for p in pickle.loads(path.read_bytes())}


def prune_inflight(io, live: set[int]) -> None:
    d = io.paths.workdir / INFLIGHT_DIR
    if d.exists():
        for f in d.glob("*.pkl"):
            if f.name.split(".")[0].isdigit() and int(f.name.split(".")[0]) not in live:
                f.unlink()


# ------------------------------------------------------------------ the learner
def step_stats(trainer, produced: Produced, batch) -> dict[str, float]:
    """The asynchronous step's own metrics: staleness, idle times, the behaviour ratio."""
    c = trainer.c
    staleness = produced.step - produced.version
    rows = int(np.sum(produced.groups.valid))
    out = {
        "async/staleness": float(staleness),
        "async/policy_version": float(produced.version),
        f"async/rows_at_staleness_{staleness}": float(rows),
        "async/rollout_wait_seconds": produced.wait_seconds,
        "async/weight_push_seconds": produced.push_seconds,
    }
    info, valid = produced.groups.info, produced.groups.valid
    for key in sorted(info):  # partial rollouts: sampled tokens per staleness, discards
        if key.startswith("tokens_staleness_") or key == "aborted_tokens":
            out[f"async/{key}"] = float(np.sum(np.asarray(info[key])[valid]))
    if c.loss.recompute_old_logps:  # π_old is the learner's: ρ = π_old / μ is measured
        out.update(
            correction_stats(
                c.loss.rollout_correction,
                batch.old_logps_BxT,
                batch.behaviour_logps_BxT,
                batch.mask_BxT,
                cap=c.loss.rollout_correction_cap,
            )
        )
    return out


def run_async(
    trainer, stop_rule: Callable[[], bool] | None = None, worker_class=RolloutWorker
) -> dict[str, Any]:
    """`Trainer.run` with rollouts overlapping the update (see the module docstring); the
    rollout worker is a `worker_class` (`RolloutWorker` or `async_process.ProcessWorker`)."""
    c, p, io = trainer.c, trainer.parts, trainer.io
    k = c.async_rl.max_staleness
    if p.processes > 1:
        raise NotImplementedError(
            f"config.async_rl.max_staleness = {k} runs in one process only "
            f"(this run has {p.processes}); set it to 0 for a multi-process run"
        )
    if stop_rule is not None:
        raise NotImplementedError("Trainer.run(stop_rule=...) is synchronous only")
    trainer.state, start = io.restore(trainer.state, p.prompts)
    preloaded = {}
    if start:
        p.selector.state = io.restore_scheduler(start, p.selector.state)
        preloaded = load_inflight(io, start)
        missing = [s for s in range(start, min(start + k, c.train.steps)) if s not in preloaded]
        if missing:
            log.warning(
                "steps %s have no saved in-flight groups (the run was extended): "
                "they are sampled by version %d",
                missing,
                start,
            )
    if start == 0 and c.eval.at_start:
        io.log_eval(0, trainer.evaluate())
    versions = Versions()
    versions.publish(start, trainer.state.params, keep=k)
    worker = worker_class(trainer, k, start, start, c.train.steps, versions, preloaded)
    worker.start()
    step = start
    try:
        with io.preemption() as guard:
            while step < c.train.steps:
                t0 = time.perf_counter()
                produced = worker.get(step)
                t1 = time.perf_counter()
                groups = produced.groups
                stats = combine_select_stats(produced.stats)
                stats.update(
                    trainer.learn(
                        groups,
                        produced.fields,
                        step,
                        batch_stats=functools.partial(step_stats, trainer, produced),
                    )
                )
                step += 1
                stop = distributed.agree(guard.requested)
                save = step % c.checkpoint.every == 0 or step == c.train.steps or stop
                if not save:  # the worker may sample with version `step` at once
                    versions.publish(step, trainer.state.params, keep=k)
                stats["async/learner_wait_seconds"] = t1 - t0
                trainer.log_step(
                    step, groups, stats, rollout_seconds=produced.rollout_seconds, t0=t0, t1=t1
                )
                if c.eval.every and step % c.eval.every == 0 and step < c.train.steps:
                    io.log_eval(step, trainer.evaluate())
                if save:
                    # Version `step` is not out: the worker stops after step + k − 1, and
                    # its groups, the scheduler state and the prompt position after them
                    # are saved together (the in-flight rule of the module docstring).
                    last = min(step + k, c.train.steps) - 1
                    inflight = worker.pending_through(last) if last >= step else []
                    save_inflight(io, step, inflight)
                    io.save(step, trainer.state, p.prompts, stats, p.selector.state)
                    prune_inflight(io, set(io.ckpt.all_steps()) | {step})
                    versions.publish(step, trainer.state.params, keep=k)
                if stop:
                    by = guard.signal_name or "another process's signal"
                    log.warning("%s received: checkpoint saved at step %d", by, step)
                    return {"preempted": True, "step": step}
    finally:
        versions.close()
        worker.join(timeout=60)
    return trainer.finish(step)
