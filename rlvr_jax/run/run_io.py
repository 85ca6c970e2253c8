"""What an RL run writes and reads in its workdir.

  run.lock          the live run's host, pid and start time (one run per workdir)
  config.json       the full config (a rerun with other algorithm fields is refused,
                    unless they are named in `allow_config_change`)
  metrics.jsonl     one line per train step and per evaluation (+ tensorboard/)
  checkpoints/      orbax: train state + metadata
  iterators/<step>/process_<i>-of-<n>.json   each process's prompt iterator position
  scheduler/<step>.npz   the select-stage scheduler's state at each checkpointed step
                    (its leaves in `jax.tree.leaves` order; runs with a scheduler only)
  export/           the final policy in Hugging Face format (+ tokenizer)
  results.md, curves.png   the before/after table and the training curves
  wandb/            the Weights & Biases runs (log.backends = "...,wandb" only)

  corrupt_checkpoints/<step>/  a checkpoint that no longer restores, set aside on resume

Process 0 writes the files that orbax does not manage, except the iterator
positions: every process writes its own (each host reads its own prompt shard).
Process 0 also holds the workdir lock: a second run on the same workdir is refused
at start, naming the holder; a lock left by a dead process is taken over.

Resuming rewinds the whole record to the checkpoint: `metrics.jsonl` is cut to the
records it held when the checkpoint was saved (none when there is no checkpoint
yet), so after any crash and rerun it equals the uninterrupted run's log. If the
newest checkpoint does not restore (a corrupted file), the newest one that does is
used, with a warning, and the broken one is moved to `corrupt_checkpoints/`.

A run stopped by SIGTERM saves a checkpoint and its process exits with
EXIT_PREEMPTED (75, EX_TEMPFAIL), so a scheduler can requeue it. A finished run
(`finished_step`: its last checkpoint is train.steps, its outputs are written and
the config is unchanged) is not run again: `rlvr_jax.main` prints its summary
(`report.run_summary`) and exits, unless told to evaluate it again.
Paths are `etils.epath` paths, so a `gs://bucket/run` workdir stays a URL (pathlib
would collapse its `//`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
from etils import epath
from flax import nnx

from rlvr_jax import distributed, models
from rlvr_jax.locking import FileLock, HeldError
from rlvr_jax.run.backends import parse_backends
from rlvr_jax.run.checkpointing import CheckpointMismatch, PreemptionGuard, RunCheckpointer
from rlvr_jax.run.guard import DivergenceGuard, resume_hint
from rlvr_jax.run.logger import MetricsLogger
from rlvr_jax.run.report import RESULTS_FILE, write_report
from rlvr_jax.scheduling import load_state, save_state
from rlvr_jax.train.warmstart import save_tokenizer

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
LOCK_FILE = "run.lock"
# The exit status of a run stopped by SIGTERM after saving its checkpoint: sysexits.h's
# EX_TEMPFAIL ("try again later"), distinct from success (0) and from errors (1).
EXIT_PREEMPTED = 75
# Fields a resumed run may change: how long it runs, where and what it writes, how it
# guards against divergence, not what it learns (checkpoints restore onto any mesh).
RESUMABLE_PREFIXES = ("train.steps", "eval.", "checkpoint.", "log.", "mesh.", "guard.")


def as_path(path: str | os.PathLike) -> epath.Path:
    """An epath path that keeps URLs ("gs://b/x") intact; local paths as given."""
    return epath.Path(os.fspath(path))


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where a run's files live under its workdir (a local path or a gs:// URL)."""

    workdir: epath.Path

    @classmethod
    def of(cls, workdir: str | os.PathLike) -> RunPaths:
        return cls(as_path(workdir))

    @property
    def config(self) -> epath.Path:
        return self.workdir / CONFIG_FILE

    @property
    def checkpoints(self) -> epath.Path:
        return self.workdir / "checkpoints"

    @property
    def scheduler_dir(self) -> epath.Path:
        return self.workdir / "scheduler"

    @property
    def iterators_dir(self) -> epath.Path:
        return self.workdir / "iterators"

    @property
    def export(self) -> epath.Path:
        return self.workdir / "export"

    @property
    def lock(self) -> epath.Path:
        return self.workdir / LOCK_FILE

    @property
    def corrupt(self) -> epath.Path:
        return self.workdir / "corrupt_checkpoints"

    def scheduler(self, step: int) -> epath.Path:
        return self.scheduler_dir / f"{step}.npz"

    def iterator(self, step: int, process_index=None, process_count=None) -> epath.Path:
        """This process's (or the given one's) prompt-iterator file of checkpoint `step`."""
        name = distributed.iterator_state_name(process_index, process_count)
        return self.iterators_dir / str(step) / name


def _write_atomic(path: epath.Path, write) -> None:
    """`write(file)` into a temporary sibling, then renamed: readers never see half a file."""
    tmp = path.parent / f"{path.name}.tmp"
    with tmp.open("wb") as f:
        write(f)
    tmp.replace(path)


def lock_on_chief(path, what: str) -> FileLock | None:
    """Process 0 takes the lock `path` (for `what`); every process raises if it could not.

    Returns:
      The held lock on process 0 (release it when done), None on the others.
    """
    lock, error = None, None
    if distributed.is_logging_process():
        as_path(path).parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path, what=what)
        try:
            lock.acquire()
        except HeldError as err:
            lock, error = None, err
    if distributed.agree(error is not None):
        raise error or HeldError(f"process 0 could not lock {path}")
    return lock


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def with_defaults(saved: dict[str, Any], defaults: dict[str, Any] | None) -> dict[str, Any]:
    """`saved` (flattened) with the fields it lacks taken from `defaults` (flattened).

    A workdir made before a field existed ran as that field's default (new fields
    default to the old behaviour), so a field it lacks is not a change when this run
    keeps the default.
    """
    out = _flat(saved)
    for k, v in _flat(defaults or {}).items():
        out.setdefault(k, v)
    return out


def check_resumable(
    saved: dict[str, Any],
    current: dict[str, Any],
    path: Path,
    allow: Sequence[str] = (),
    defaults: dict[str, Any] | None = None,
) -> list[str]:
    """The fields that differ between a workdir's config and this one.

    Args:
      saved, current: the two configs as nested dicts.
      path: the saved config's file (for the error).
      allow: fields that may differ beyond RESUMABLE_PREFIXES: a field name
        ("optimizer.lr") or a section ("optimizer"); each must exist in `current`.
      defaults: the default config (nested): what a field `saved` lacks was (it
        was added after the run started; `with_defaults`).
    Returns:
      The differing field names (resumable or allowed ones), sorted.
    Raises:
      ValueError: a field differs that is neither resumable nor allowed (the
        message lists them and the flag that would allow them), or `allow`
        names a field the config does not have.
    """
    a, b = with_defaults(saved, defaults), _flat(current)
    for name in allow:
        if name not in b and not any(k.startswith(name + ".") for k in b):
            raise ValueError(f"--allow_config_change names {name!r}, which is no config field")
    prefixes = RESUMABLE_PREFIXES + tuple(f"{n}." for n in allow)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    refused = [k for k in diff if not (k in allow or k.startswith(prefixes))]
    if refused:
        shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in refused[:8])
        raise ValueError(
            f"{path} holds a run with a different config ({shown}); use a new --workdir, "
            f"change only {', '.join(RESUMABLE_PREFIXES)}, or resume from its last "
            f"checkpoint with the change: --allow_config_change={','.join(refused)}"
        )
    return diff


def checkpoint_steps(path: epath.Path) -> list[int]:
    """The steps of the complete orbax checkpoints in `path` (its integer-named dirs)."""
    if not path.is_dir():
        return []
    return sorted(int(d.name) for d in path.iterdir() if d.name.isdigit() and d.is_dir())


def finished_step(workdir, config: ml_collections.ConfigDict, defaults=None) -> int | None:
    """The last step of a finished run of `config` in `workdir`, or None.

    Finished: the saved config.json equals `config` (a changed field, e.g. more
    train.steps or another eval size, makes it a resume), the newest checkpoint is
    at train.steps, and the outputs of the end are there (results.md; export/
    with checkpoint.export_final). Reads files only (no lock, no JAX).
    """
    paths = RunPaths.of(workdir)
    if not paths.config.is_file():
        return None
    try:
        saved = json.loads(paths.config.read_text())
    except json.JSONDecodeError:
        return None
    if with_defaults(saved, defaults) != _flat(json.loads(config.to_json())):
        return None
    steps = checkpoint_steps(paths.checkpoints)
    if not steps or steps[-1] != config.train.steps:
        return None
    if not (paths.workdir / RESULTS_FILE).is_file():
        return None
    if config.checkpoint.export_final and not (paths.export / "config.json").is_file():
        return None
    return steps[-1]


class RunIO:
    """The workdir of one run: config check, logger, checkpointer, export and report."""

    def __init__(
        self,
        workdir: str | Path,
        config: ml_collections.ConfigDict,
        *,
        allow_config_change: Sequence[str] = (),
        defaults: dict[str, Any] | None = None,
    ):
        """Locks the workdir and opens its config, log and checkpoints.

        Args:
          workdir: the run directory (a local path or a gs:// URL; created).
          config: the run's config; a workdir with a checkpoint accepts it only
            if it differs from the saved one in resumable or allowed fields.
          allow_config_change: fields (or sections) this resume may change, e.g.
            ("optimizer.lr",) after a divergence; the changes are logged.
          defaults: the default config as a nested dict: a field the saved config
            lacks (added since the run started) counts as its default.
        Raises:
          ValueError: an empty workdir, or a refused config change.
          HeldError: another live run holds the workdir.
        """
        if not os.fspath(workdir).strip():
            raise ValueError(
                "the workdir is empty (--workdir=): give the run its own directory, e.g. "
                "--workdir=runs/my_run"
            )
        self.paths = RunPaths.of(workdir)
        self.workdir = self.paths.workdir
        self.chief = distributed.is_logging_process()
        self._lock = self._acquire_lock()
        self._defaults = defaults
        try:
            self._open(config, tuple(allow_config_change))
        except BaseException:
            self._release_lock()
            raise

    def _acquire_lock(self) -> FileLock | None:
        return lock_on_chief(self.paths.lock, f"run directory {self.workdir}")

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _open(self, config: ml_collections.ConfigDict, allow: tuple[str, ...]) -> None:
        # The checkpointer is opened only under the lock: opening it removes the
        # temporary directories of unfinished saves, which a live run may be writing.
        self.ckpt = RunCheckpointer(self.paths.checkpoints, keep=config.checkpoint.keep)
        current = json.loads(config.to_json())
        path = self.paths.config
        # Without a checkpoint nothing is resumed, so any config may start over.
        if path.is_file() and self.ckpt.all_steps():
            saved = json.loads(path.read_text())
            changed = check_resumable(saved, current, path, allow, self._defaults)
            if changed:
                log.warning("resuming %s with config changes: %s", self.workdir, ", ".join(changed))
        if self.chief:
            text = json.dumps(current, indent=2, sort_keys=True).encode()
            _write_atomic(path, lambda f: f.write(text))
        # log.backends / wandb_*: declared by rl/config.py; read with defaults for other
        # configs (a pipeline stage's own).
        log_c = config.log
        self.logger = MetricsLogger(
            self.workdir,
            enabled=self.chief,
            tensorboard=log_c.tensorboard,
            progress_every_s=log_c.progress_every_s,
            backends=parse_backends(log_c.get("backends", "tensorboard")),
            wandb_project=log_c.get("wandb_project", "rlvr_jax"),
            wandb_mode=log_c.get("wandb_mode", "offline"),
        )
        self.guard = DivergenceGuard(config.guard.max_grad_norm, config.guard.max_param_abs)

    def latest_step(self) -> int | None:
        return self.ckpt.latest_step()

    def restore(self, state, prompts):
        """(state, step) from the newest checkpoint that restores, prompt iterator repositioned.

        Arrays are restored onto `state`'s shardings (a sharded run restores sharded,
        onto whatever mesh it runs now); each process reads its own iterator position.
        A checkpoint that fails to read is moved to `corrupt_checkpoints/` with a
        warning and the previous one is tried. The metrics log is cut back to what
        it held when the restored checkpoint was saved (to nothing without one).

        Raises:
          CheckpointMismatch: the checkpoint holds another train state (another model
            or optimizer): no fallback, every checkpoint of the run would differ.
          RuntimeError: checkpoints exist but none restores (none is moved).
        """
        steps = self.ckpt.all_steps()
        failed: list[tuple[int, Exception]] = []
        for step in reversed(steps):
            try:
                restored, data_state, meta = self.ckpt.restore(state, step)
            except CheckpointMismatch:
                raise
            except Exception as err:  # noqa: BLE001 - tensorstore/orbax raise bare Exceptions
                log.warning(
                    "checkpoint %d in %s does not restore (%s: %.300s); trying the previous one",
                    step, self.ckpt_dir, type(err).__name__, err,
                )  # fmt: skip
                failed.append((step, err))
                continue
            for bad, _ in failed:  # newer than `step`: its rerun would write them again
                log.warning("moving checkpoint %d to %s", bad, self.paths.corrupt)
                self._set_aside(bad)
            self._reposition(step, prompts, data_state)
            self.logger.truncate(step, keep_records=meta.get("log_records"))
            log.info("resumed from %s at step %d", self.ckpt_dir, step)
            return restored, int(step)
        if failed:  # none restores: more likely the environment than every file; move nothing
            raise RuntimeError(
                f"none of the checkpoints {steps} in {self.ckpt_dir} restores; the first "
                f"error: {failed[0][1]!r:.500}"
            ) from failed[0][1]
        self.logger.truncate(-1)  # records of an attempt that crashed before any checkpoint
        return state, 0

    def _set_aside(self, step: int) -> None:
        """Moves a checkpoint that does not restore out of orbax's view (process 0)."""
        if self.chief:
            self.paths.corrupt.mkdir(parents=True, exist_ok=True)
            dest = self.paths.corrupt / str(step)
            if dest.exists():
                dest.rmtree()
            (self.ckpt_dir / str(step)).rename(dest)
        distributed.sync(f"rlvr_jax_run_io_set_aside_{step}")
        self.ckpt.reload()

    def _reposition(self, step: int, prompts, data_state) -> None:
        path = self.paths.iterator(step)
        if path.is_file():
            prompts.set_state(json.loads(path.read_text()))
        elif data_state is not None:  # checkpoints written before per-process iterator files
            prompts.set_state(data_state)
        else:
            raise FileNotFoundError(
                f"{path} is missing: checkpoint {step} has no prompt-iterator state for this "
                "process (was it written by a run with another number of processes?)"
            )

    @property
    def ckpt_dir(self) -> epath.Path:
        return self.paths.checkpoints

    def save(
        self, step: int, state, prompts, metrics: dict[str, float], scheduler_state=None
    ) -> None:
        """Checkpoints a step (every process calls it, with its own `prompts`).

        `scheduler_state` (a dict of arrays) is saved next to it by process 0, each
        process's iterator position to `iterators/<step>/`. Both are written
        (atomically) before the orbax step, so every complete checkpoint has them;
        files of pruned steps are removed.
        """
        iterator_path = self.paths.iterator(step)
        iterator_path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(prompts.get_state()).encode()
        _write_atomic(iterator_path, lambda f: f.write(text))
        if scheduler_state is not None and self.chief:
            self.sched_dir.mkdir(parents=True, exist_ok=True)
            _write_atomic(self.paths.scheduler(step), lambda f: save_state(f, scheduler_state))
        distributed.sync(f"rlvr_jax_run_io_save_{step}")  # all iterator files before the commit
        meta = {
            "step": step,
            "metrics": {k: float(v) for k, v in metrics.items()},
            "log_records": self.logger.num_records,  # what a resume cuts the log back to
        }
        self.ckpt.save(step, state, data_state=None, meta=meta, force=True)
        if self.chief:
            self._prune(set(self.ckpt.all_steps()) | {step})

    def _prune(self, live: set[int]) -> None:
        """Removes scheduler and iterator files of steps orbax no longer keeps."""
        if self.sched_dir.is_dir():
            for f in self.sched_dir.glob("*.npz"):
                if f.name.split(".")[0].isdigit() and int(f.name.split(".")[0]) not in live:
                    f.unlink()
        if self.paths.iterators_dir.is_dir():
            for d in self.paths.iterators_dir.iterdir():
                if d.name.isdigit() and int(d.name) not in live:
                    d.rmtree()

    @property
    def sched_dir(self) -> epath.Path:
        return self.paths.scheduler_dir

    def restore_scheduler(self, step: int, like):
        """The scheduler state saved with checkpoint `step`, in the structure of `like`."""
        path = self.paths.scheduler(step)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: checkpoint {step} of a scheduled run has no scheduler state"
            )
        with path.open("rb") as f:
            return load_state(f, like)

    def preemption(self) -> PreemptionGuard:
        return PreemptionGuard()

    def check_update(
        self, state, metrics: dict[str, Any], step: int, update: int = 0, health=None
    ) -> None:
        """Raises `guard.Diverged` if an optimizer update left a non-finite or exploded state.

        Call after every update, before the step can be saved: the policy's and
        critic's parameters and the update's gradient norms are checked against
        `config.guard`. `health`: `guard.param_health` of those parameters, if
        already computed (then `state` may be None).
        """
        params = None
        if health is None:
            params = {"policy": state.params, "critic": state.critic_params}
        last = self.latest_step()
        self.guard.check(params, metrics, step=step, update=update, last_good=last, health=health)

    def resume_hint(self) -> str:
        """Where a rerun resumes from (for errors that stop a run)."""
        return resume_hint(self.latest_step())

    def log_train(self, step: int, total: int, metrics: dict[str, float]) -> None:
        self.logger.log(step, metrics, split="train")
        self.logger.progress(step, total, metrics)

    def log_eval(self, step: int, metrics: dict[str, float]) -> None:
        self.logger.log(step, metrics, split="eval")
        shown = "  ".join(
            f"{k} {v:.3f}" for k, v in metrics.items() if k.startswith(("pass@", "avg@"))
        )
        log.info("eval at step %d: %s", step, shown)

    def finish(self, model, tokenizer) -> None:
        """Exports the final policy (if given) and writes results.md / curves.png."""
        self.ckpt.wait()
        if model is not None and jax.process_count() > 1:
            # Every process gathers the sharded weights (a collective); process 0 writes them.
            graphdef, state = nnx.split(model)
            model = nnx.merge(graphdef, distributed.to_host(state))
        if not self.chief:
            return
        if model is not None:
            export = self.paths.export
            models.save_pretrained(model, model.config, export)
            save_tokenizer(tokenizer, export)
        self.logger.close()
        write_report(self.workdir)  # after the export: results.md names its digest

    def close(self) -> None:
        """Closes the log and the checkpointer (waiting for saves), then frees the workdir."""
        try:
            self.logger.close()
            self.ckpt.close()
        finally:
            self._release_lock()
