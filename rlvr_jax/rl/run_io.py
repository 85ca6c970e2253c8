"""What an RL run writes and reads in its workdir.

  config.json       the full config (a rerun with other algorithm fields is refused)
  metrics.jsonl     one line per train step and per evaluation (+ tensorboard/)
  checkpoints/      orbax: train state + prompt iterator position + metadata
  scheduler/<step>.npz   the select-stage scheduler's state at each checkpointed step
                    (its leaves in `jax.tree.leaves` order; runs with a scheduler only)
  export/           the final policy in Hugging Face format (+ tokenizer)
  results.md, curves.png   the before/after table and the training curves

Only process 0 writes files that orbax does not manage.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jax
import ml_collections

from rlvr_jax.scheduling import load_state, save_state
from rlvr_jax.train.checkpointing import PreemptionGuard, RunCheckpointer
from rlvr_jax.train.logger import MetricsLogger

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
# Fields a resumed run may change: how long it runs and what it writes, not what it learns.
RESUMABLE_PREFIXES = ("train.steps", "eval.", "checkpoint.", "log.")


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
        self.workdir = Path(workdir)
        self.chief = jax.process_index() == 0
        current = json.loads(config.to_json())
        path = self.workdir / CONFIG_FILE
        if path.is_file():
            check_resumable(json.loads(path.read_text()), current, path)
        if self.chief:
            self.workdir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(current, indent=2, sort_keys=True))
            tmp.replace(path)
        self.logger = MetricsLogger(
            self.workdir,
            enabled=self.chief,
            tensorboard=config.log.tensorboard,
            progress_every_s=config.log.progress_every_s,
        )
        self.ckpt = RunCheckpointer(self.workdir / "checkpoints", keep=config.checkpoint.keep)

    def latest_step(self) -> int | None:
        return self.ckpt.latest_step()

    def restore(self, state, prompts):
        """(state, step) from the latest checkpoint, with the prompt iterator repositioned."""
        step = self.ckpt.latest_step()
        if step is None:
            return state, 0
        state, data_state, _ = self.ckpt.restore(state, step)
        if data_state is not None:
            prompts.set_state(data_state)
        self.logger.truncate(step)
        log.info("resumed from %s at step %d", self.ckpt_dir, step)
        return state, int(step)

    @property
    def ckpt_dir(self) -> Path:
        return self.workdir / "checkpoints"

    def save(
        self, step: int, state, prompts, metrics: dict[str, float], scheduler_state=None
    ) -> None:
        """Checkpoints a step; `scheduler_state` (a dict of arrays) is saved next to it.

        The scheduler file is written (atomically) before the orbax step, so every
        complete checkpoint has its scheduler state; files of pruned steps are removed.
        """
        if scheduler_state is not None and self.chief:
            self.sched_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.sched_dir / f"{step}.tmp.npz"
            save_state(str(tmp), scheduler_state)
            tmp.replace(self.sched_dir / f"{step}.npz")
        meta = {"step": step, "metrics": {k: float(v) for k, v in metrics.items()}}
        self.ckpt.save(step, state, data_state=prompts.get_state(), meta=meta, force=True)
        if scheduler_state is not None and self.chief:
            live = set(self.ckpt.all_steps()) | {step}
            for f in self.sched_dir.glob("*.npz"):
                if f.name.split(".")[0].isdigit() and int(f.name.split(".")[0]) not in live:
                    f.unlink()

    @property
    def sched_dir(self) -> Path:
        return self.workdir / "scheduler"

    def restore_scheduler(self, step: int, like):
        """The scheduler state saved with checkpoint `step`, in the structure of `like`."""
        path = self.sched_dir / f"{step}.npz"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: checkpoint {step} of a scheduled run has no scheduler state"
            )
        return load_state(str(path), like)

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

            export = self.workdir / "export"
            save_pretrained(model, model.config, export)
            save_tokenizer(tokenizer, export)
        from rlvr_jax.train.report import write_report

        self.logger.close()
        write_report(self.workdir)

    def close(self) -> None:
        self.logger.close()
        self.ckpt.close()
