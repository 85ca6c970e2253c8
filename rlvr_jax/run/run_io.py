"""What an RL run writes and reads in its workdir.

  config.json       the full config (a rerun with other algorithm fields is refused)
  metrics.jsonl     one line per train step and per evaluation (+ tensorboard/)
  checkpoints/      orbax: train state + metadata
  iterators/<step>/process_<i>-of-<n>.json   each process's prompt iterator position
  scheduler/<step>.npz   the select-stage scheduler's state at each checkpointed step
                    (its leaves in `jax.tree.leaves` order; runs with a scheduler only)
  export/           the final policy in Hugging Face format (+ tokenizer)
  results.md, curves.png   the before/after table and the training curves

Process 0 writes the files that orbax does not manage, except the iterator
positions: every process writes its own (each host reads its own prompt shard).
Paths are `etils.epath` paths, so a `gs://bucket/run` workdir stays a URL (pathlib
would collapse its `//`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import ml_collections
from etils import epath

from rlvr_jax import distributed
from rlvr_jax.run.checkpointing import PreemptionGuard, RunCheckpointer
from rlvr_jax.run.logger import MetricsLogger
from rlvr_jax.scheduling import load_state, save_state

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
# Fields a resumed run may change: how long it runs, where and what it writes, not what it
# learns (checkpoints restore onto any mesh).
RESUMABLE_PREFIXES = ("train.steps", "eval.", "checkpoint.", "log.", "mesh.")


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


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resumable(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """ValueError listing the fields that differ between a workdir's config and this one."""
    a, b = _flat(saved), _flat(current)
    diff = sorted(
        k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.startswith(RESUMABLE_PREFIXES)
    )
    if diff:
        shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:8])
        raise ValueError(
            f"{path} holds a run with a different config ({shown}); use a new --workdir, "
            f"or change only {', '.join(RESUMABLE_PREFIXES)}"
        )


class RunIO:
    """The workdir of one run: config check, logger, checkpointer, export and report."""

    def __init__(self, workdir: str | Path, config: ml_collections.ConfigDict):
        self.paths = RunPaths.of(workdir)
        self.workdir = self.paths.workdir
        self.chief = distributed.is_logging_process()
        current = json.loads(config.to_json())
        path = self.paths.config
        if path.is_file():
            check_resumable(json.loads(path.read_text()), current, path)
        if self.chief:
            self.workdir.mkdir(parents=True, exist_ok=True)
            text = json.dumps(current, indent=2, sort_keys=True).encode()
            _write_atomic(path, lambda f: f.write(text))
        self.logger = MetricsLogger(
            self.workdir,
            enabled=self.chief,
            tensorboard=config.log.tensorboard,
            progress_every_s=config.log.progress_every_s,
        )
        self.ckpt = RunCheckpointer(self.paths.checkpoints, keep=config.checkpoint.keep)

    def latest_step(self) -> int | None:
        return self.ckpt.latest_step()

    def restore(self, state, prompts):
        """(state, step) from the latest checkpoint, with the prompt iterator repositioned.

        Arrays are restored onto `state`'s shardings (a sharded run restores sharded,
        onto whatever mesh it runs now); each process reads its own iterator position.
        """
        step = self.ckpt.latest_step()
        if step is None:
            return state, 0
        state, data_state, _ = self.ckpt.restore(state, step)
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
        self.logger.truncate(step)
        log.info("resumed from %s at step %d", self.ckpt_dir, step)
        return state, int(step)

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
        meta = {"step": step, "metrics": {k: float(v) for k, v in metrics.items()}}
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
        if not self.chief:
            return
        if model is not None:
            from rlvr_jax.models import save_pretrained
            from rlvr_jax.train.warmstart import save_tokenizer

            export = self.paths.export
            save_pretrained(model, model.config, export)
            save_tokenizer(tokenizer, export)
        from rlvr_jax.run.report import write_report

        self.logger.close()
        write_report(self.workdir)

    def close(self) -> None:
        self.logger.close()
        self.ckpt.close()
