"""Where a run's scalars go besides metrics.jsonl: tensorboard and Weights & Biases.

`config.log.backends` names them, comma-separated ("tensorboard", "wandb"). Each
backend gets every scalar the logger writes, under the same name
"<split>/<metric>" (e.g. "train/reward", "eval/pass@8"), and opens its files
only when the first scalar arrives, so a run (or a resume) that logs nothing
leaves nothing behind.

  tensorboard  tensorboardX event files in workdir/tensorboard/ (a dependency)
  wandb        a W&B run, its files in workdir/wandb/; `pip install -e '.[wandb]'`.
               The package is imported only when this backend is chosen. Mode
               "offline" (the default: nothing leaves the machine; `wandb sync
               workdir/wandb/offline-run-*` uploads later) or "online".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
BACKENDS = ("tensorboard", "wandb")
WANDB_MODES = ("offline", "online")


class Backend(Protocol):
    """A sink for the logger's scalars."""

    def scalars(self, values: dict[str, float], step: int) -> None:
        """One record's scalars, tag ("<split>/<metric>") -> value, at `step`."""

    def rewind(self, after_step: int) -> None:
        """A resume from checkpoint `after_step`: what was logged past it is stale."""

    def close(self) -> None: ...


def parse_backends(text: str) -> tuple[str, ...]:
    """The backend names of a `log.backends` string ("tensorboard,wandb"; "" = none).

    Raises ValueError naming an unknown one and the choices.
    """
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(
            f"config.log.backends = {text!r}: unknown {', '.join(map(repr, unknown))}; "
            f"valid: {', '.join(BACKENDS)} (comma-separated)"
        )
    return names


class TensorBoard:
    """tensorboardX event files in `logdir`, opened at the first scalar.

    After `rewind(s)`, the next writer carries purge_step s + 1, so tensorboard
    hides the events a crashed attempt wrote past the checkpoint it resumed from.
    """

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)
        self._writer = None
        self._purge_step: int | None = None

    def scalars(self, values: dict[str, float], step: int) -> None:
        if not values:
            return
        if self._writer is None:
            import tensorboardX  # Lazy: optional at import time (docs/design.md).

            self._writer = tensorboardX.SummaryWriter(
                logdir=str(self.logdir), purge_step=self._purge_step, flush_secs=10
            )
            self._purge_step = None
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, step)

    def rewind(self, after_step: int) -> None:
        self.close()
        self._purge_step = after_step + 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandB:
    """A Weights & Biases run in `workdir/wandb/`, started at the first scalar.

    Each process attempt is its own W&B run, grouped by the workdir's name (W&B
    cannot rewind a run's steps, so a resume starts a new one rather than mixing
    a crashed attempt's steps into it). The run's config is the workdir's config.json.

    Args:
      workdir: the run directory.
      project: the W&B project.
      mode: one of WANDB_MODES.
    """

    def __init__(self, workdir: Path, *, project: str = "rlvr_jax", mode: str = "offline"):
        if mode not in WANDB_MODES:
            raise ValueError(f"config.log.wandb_mode = {mode!r}; valid: {', '.join(WANDB_MODES)}")
        self.workdir = Path(workdir)
        self.project, self.mode = project, mode
        self._run = None

    def _start(self):
        try:
            import wandb  # Lazy: an optional extra, imported only when chosen.
        except ImportError as err:
            raise ImportError(
                "config.log.backends names 'wandb', which is not installed: "
                "pip install -e '.[wandb]' (or pip install wandb)"
            ) from err
        config_file = self.workdir / "config.json"
        config: dict[str, Any] = {}
        if config_file.is_file():
            config = json.loads(config_file.read_text())
        (self.workdir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        return wandb.init(
            project=self.project,
            dir=str(self.workdir),
            mode=self.mode,
            name=self.workdir.name,
            group=self.workdir.name,
            config=config,
            reinit="create_new",
        )

    def scalars(self, values: dict[str, float], step: int) -> None:
        if not values:
            return
        if self._run is None:
            self._run = self._start()
        self._run.log(values, step=step)

    def rewind(self, after_step: int) -> None:
        self.close()  # the next scalar starts a new run of the group

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


def make_backends(
    workdir, names: tuple[str, ...], *, wandb_project: str = "rlvr_jax", wandb_mode="offline"
) -> list[Backend]:
    """The backends of `names` (see `parse_backends`) for a run in `workdir`."""
    workdir = Path(workdir)
    out: list[Backend] = []
    for name in names:
        if name == "tensorboard":
            out.append(TensorBoard(workdir / TENSORBOARD_DIR))
        else:
            out.append(WandB(workdir, project=wandb_project, mode=wandb_mode))
    return out
