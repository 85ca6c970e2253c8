"""Score-stage signals: the extra batch fields some credit transforms and losses read.

Methods beyond plain GRPO read more than the rollouts and their rewards: a
teacher's log-probs (OPD family), the policy's log-probs under a hinted context
(self-distillation), the first wrong step of a trace (Cliff), a strategy cue
(Cue-GRPO), answer spans (OM-GRPO), counterfactual log-prob shifts (CSCR), the
behaviour policy's log-probs (OC-GRPO / LSPO), or a replacement reward (GAR).
A *signal* computes such fields for one training batch. It is registered with
the fields it provides:

  @register("first_mistake", provides=("first_mistake_B",), some_option=1.0)
  def first_mistake(ctx, groups, batch, *, some_option) -> dict[str, np.ndarray]

and a config turns it on with `config.score.signals = "first_mistake,..."`
(options in `config.score.<name>.*`). Signals run in the listed order after the
old/reference log-probs and before the advantage estimator; each sees the
fields of the signals before it in `batch`. A signal that returns "rewards_B"
replaces the sequence rewards the estimator sees (GAR).

`validate` (from `rl.config.validate`) checks before anything is built that
every field a configured transform or loss requires is either standard or
provided by a configured signal, and names the signal to add otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rlvr_jax.rl.registry import Registry

SIGNALS = Registry("score signal")
# field name -> names of the signals that provide it.
PROVIDERS: dict[str, list[str]] = {}
# Fields the trainer's batch always has (credit.STANDARD_FIELDS plus the update's own).
BUILTIN_FIELDS = (
    "tokens_BxT",
    "attention_mask_BxT",
    "mask_BxT",
    "old_logps_BxT",
    "rollout_logps_BxT",
    "ref_logps_BxT",
    "entropy_BxT",
    "rewards_B",
    "correct_B",
    "group_B",
    "valid_B",
    "step",
    # The update's own, for the losses that ask (`rl.methods.distill`): the student's
    # hidden states and output kernel, the teacher's output kernel.
    "hidden_BxTxD",
    "output_kernel_DxV",
    "teacher_kernel_DxV",
)


def register(
    name: str, *, provides: tuple[str, ...], requires: tuple[str, ...] = (), **defaults: Any
) -> Callable[[Callable], Callable]:
    """Decorator registering a signal, the batch fields it provides, and its defaults.

    Args:
      name: the name a config lists in `score.signals`.
      provides: the batch fields fn returns (every one of them, every call).
      requires: fields fn reads beyond BUILTIN_FIELDS (from signals listed before it).
      **defaults: fn's hyperparameters (they become `config.score.<name>.*`).
    """

    def wrap(fn: Callable) -> Callable:
        SIGNALS.register(name, requires=requires, **defaults)(fn)
        for field in provides:
            PROVIDERS.setdefault(field, []).append(name)
        _PROVIDES[name] = tuple(provides)
        return fn

    return wrap


_PROVIDES: dict[str, tuple[str, ...]] = {}


def provides(name: str) -> tuple[str, ...]:
    """The batch fields signal `name` provides."""
    SIGNALS.get(name)
    return _PROVIDES[name]


@dataclasses.dataclass
class ScoreContext:
    """What a signal may use: the run's config, models and jitted programs.

    Attributes:
      config: the run's locked config.
      trainer: the `rl.trainer.Trainer` (its tokenizer, task, scorer, current
        `state.params`, `ref_params`, `rest`, and `chunk` for row-chunked forwards).
      cache: per-run storage a signal may fill once (e.g. a loaded teacher model).
      metrics: this step's diagnostics from the signals (name -> float; cleared by
        `compute`, logged by the trainer with the step's metrics).
    """

    config: Any
    trainer: Any
    cache: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)


def signal_names(c) -> list[str]:
    """The signals of `config.score.signals`, in order."""
    return [n.strip() for n in c.score.signals.split(",") if n.strip()]


def check_fields(c, needed: dict[str, tuple[str, ...]]) -> None:
    """ValueError if a consumer needs a field no configured signal provides.

    Args:
      c: the config.
      needed: consumer description (e.g. "credit transform 'cliff'") -> fields it requires.
    """
    available = set(BUILTIN_FIELDS)
    for name in signal_names(c):
        entry = SIGNALS.get(name)
        missing = [f for f in entry.requires if f not in available]
        if missing:
            raise ValueError(
                f"config.score.signals: signal {name!r} needs {missing}, which no signal "
                f"listed before it provides ({_hint(missing)})"
            )
        available.update(provides(name))
    for consumer, fields in needed.items():
        missing = [f for f in fields if f not in available]
        if missing:
            raise ValueError(
                f"{consumer} needs batch fields {missing}; add to config.score.signals "
                f"({_hint(missing)})"
            )


def _hint(fields) -> str:
    parts = []
    for f in fields:
        names = PROVIDERS.get(f)
        parts.append(f"{f}: " + (" or ".join(names) if names else "no registered signal"))
    return "; ".join(parts)


def compute(ctx: ScoreContext, groups, batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """Runs the configured signals in order; returns every field they provided.

    Args:
      ctx: the ScoreContext.
      groups: the step's (trimmed) `rollout.Groups`, aligned with `batch` row by row.
      batch: the batch fields so far (BUILTIN_FIELDS); not modified.
    Returns:
      field -> array for every provided field (later signals overwrite earlier ones).
    """
    c = ctx.config
    ctx.metrics.clear()
    out: dict[str, np.ndarray] = {}
    view = dict(batch)
    for name in signal_names(c):
        entry = SIGNALS.get(name)
        fields = entry.fn(ctx, groups, view, **c.score[name].to_dict())
        want = set(provides(name))
        if set(fields) != want:
            raise RuntimeError(
                f"signal {name!r} returned fields {sorted(fields)}, declared {sorted(want)}"
            )
        out.update(fields)
        view.update(fields)
    return out


def map_row_chunks(fn, fixed: tuple, arrays: tuple, *, chunk: int) -> np.ndarray:
    """`fn(*fixed, *(a[rows] for a in arrays))` over chunks of `chunk` rows, concatenated.

    For score signals that run a jitted model over a batch of rows: the last
    chunk is filled up with copies of row 0, so every call has one shape (one
    compile per width), and the filler rows are cut from the result.

    Args:
      fn: called with the fixed arguments, then one row chunk of each array.
      fixed: leading arguments passed unchanged (e.g. params, rest).
      arrays: arrays with the same leading (row) dimension R.
      chunk: rows per call.
    Returns:
      NumPy array: the calls' results concatenated along rows, R rows (a tuple of
      them when fn returns a tuple).
    """
    rows = len(arrays[0])
    outs = []
    for i in range(0, rows, chunk):
        idx = np.arange(i, i + chunk)
        idx = np.where(idx < rows, idx, 0)
        outs.append(jax.tree.map(np.asarray, fn(*fixed, *(a[idx] for a in arrays))))
    return jax.tree.map(lambda *xs: np.concatenate(xs)[:rows], *outs)
