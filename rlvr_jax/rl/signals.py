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
fields of the signals before it in `batch`. A signal that returns a declared
batch field replaces it (GAR: "rewards_B", the sequence rewards the estimator sees).

`ctx` is a `ScoreContext`: the tokenizer, the task, the current policy and the
reference as `Scorer`s (a model bound to its parameters), the mesh and caches;
never the trainer. `groups` is the step's `rollout.Groups`; `batch` the
`rl.batch.Batch` so far (fields by name, `batch["correct_B"]`).

`validate` (from `rl.config.validate`) checks before anything is built that
every field a configured transform or loss requires is a declared batch
field, one of the scheduler's, or provided by a configured signal, and names
the signal to add otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.registry import Registry
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl.batch import Batch

SIGNALS = Registry("score signal")


def register(
    name: str,
    *,
    provides: tuple[str, ...],
    requires: tuple[str, ...] = (),
    check: Callable[[Any], None] | None = None,
    label_free: bool = False,
    **defaults: Any,
) -> Callable[[Callable], Callable]:
    """Decorator registering a signal, the batch fields it provides, and its defaults.

    Args:
      name: the name a config lists in `score.signals`.
      provides: the batch fields fn returns (every one of them, every call).
      requires: fields fn reads beyond the declared `Batch` fields (from signals
        listed before it, or the scheduler).
      check: `check(config)` of its options (registry.Entry).
      label_free: its reward never reads the verifier's labels.
      **defaults: fn's hyperparameters (they become `config.score.<name>.*`).
    """
    return SIGNALS.register(
        name, requires=requires, provides=provides, check=check, label_free=label_free, **defaults
    )


def provides(name: str) -> tuple[str, ...]:
    """The batch fields signal `name` provides."""
    return SIGNALS.get(name).provides


@dataclasses.dataclass(frozen=True)
class Scorer:
    """A model bound to its parameters: per-token log-probs of whole rows, in row chunks.

    Attributes:
      fn: jitted `(params, rest, tokens_BxT, attention_mask_BxT) -> logps_BxT`
        (`rl.update.make_scorer`; in a multi-process run it takes and returns
        this process's rows).
      graphdef, params, rest: the model's `nnx.split(model, nnx.Param, ...)`,
        for signals that run their own forward (GAR's signatures).
      config: the model's ModelConfig.
      chunk: rows per call.
    """

    fn: Callable
    graphdef: Any
    params: Any
    rest: Any
    config: Any
    chunk: int

    def logps(self, tokens_RxT, attention_mask_RxT) -> np.ndarray:
        """[R, T] float32 log-probs of each token given the ones before it (0 at the first).

        In a multi-process run a collective: every process calls it at the same point,
        with any row count (0 too) and width; all feed the largest (`pad_token_rows`).
        """
        tokens_RxT, attention_mask_RxT = np.asarray(tokens_RxT), np.asarray(attention_mask_RxT)
        r, t = tokens_RxT.shape
        if jax.process_count() > 1:
            rows, width = (int(v) for v in distributed.max_over_processes(np.array([r, t])))
            tokens_RxT, attention_mask_RxT = pad_token_rows(
                tokens_RxT, attention_mask_RxT, rows, width
            )
        out = map_row_chunks(
            self.fn, (self.params, self.rest), (tokens_RxT, attention_mask_RxT), chunk=self.chunk
        )
        return out[:r, :t].astype(np.float32)


def pad_token_rows(tokens_RxT, attention_mask_RxT, rows: int, width: int):
    """Rows of tokens grown to [rows, width], so every process feeds one shape.

    New columns go on the right, masked out (a causal model scores the old columns
    as before); new rows copy row 0, or with no rows are one token of id 0 (a filler
    whose result is dropped).

    Args:
      tokens_RxT, attention_mask_RxT: the rows (R may be 0).
      rows, width: the shape to reach (>= R, >= T).
    Returns:
      (tokens [rows, width], attention_mask [rows, width]).
    """
    r, t = tokens_RxT.shape
    tokens = np.zeros((max(rows, 1), width), tokens_RxT.dtype)
    mask = np.zeros((max(rows, 1), width), bool)
    tokens[:r, :t], mask[:r, :t] = tokens_RxT, attention_mask_RxT
    if r:
        tokens[r:], mask[r:] = tokens[0], mask[0]
    else:
        mask[:, 0] = True
    return tokens, mask.astype(attention_mask_RxT.dtype)


@dataclasses.dataclass(frozen=True)
class ScoreContext:
    """What a score signal may use (never the trainer).

    Attributes:
      tokenizer: the policy's tokenizer.
      task: the run's task.
      policy: the current policy (π_old: the weights that sampled the rollouts).
      reference: the reference policy (the initial weights), or None.
      mesh, rules: where models live (a signal that loads a model places it there).
      domain: the policy's warm-start domain ("" if it is not a warm start).
      cache: per run: what a signal builds once (a loaded teacher, a jitted fn).
      step_cache: per step (cleared before each step's signals): shared work of
        the signals of one step (e.g. the decoded rows).
      metrics: this step's diagnostics from the signals (name -> float; cleared with
        step_cache, logged by the trainer with the step's metrics).
    """

    tokenizer: Any
    task: Any
    policy: Scorer
    reference: Scorer | None = None
    mesh: Any = None
    rules: Any = "fsdp"
    domain: str = ""
    cache: dict[str, Any] = dataclasses.field(default_factory=dict)
    step_cache: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0

    @property
    def chunk(self) -> int:
        """Rows per forward pass (the policy scorer's)."""
        return self.policy.chunk

    def with_policy(self, **changes) -> ScoreContext:
        """This context with the policy scorer's fields changed (e.g. the step's params)."""
        return dataclasses.replace(self, policy=dataclasses.replace(self.policy, **changes))


def signal_names(c) -> list[str]:
    """The signals of `config.score.signals`, in order."""
    return [n.strip() for n in c.score.signals.split(",") if n.strip()]


def check_fields(c, needed: dict[str, tuple[str, ...]], available: tuple[str, ...] = ()) -> None:
    """ValueError if a consumer needs a field no configured signal provides.

    Args:
      c: the config.
      needed: consumer description (e.g. "credit transform 'cliff'") -> fields it requires.
      available: fields the batch has besides the declared `Batch` fields and the
        signals' (e.g. the scheduler's `batch_fields`).
    """
    available = set(batch_lib.FIELDS) | set(batch_lib.UPDATE_FIELDS) | set(available)
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
        names = SIGNALS.providers(f)
        parts.append(f"{f}: " + (" or ".join(names) if names else "no registered signal"))
    return "; ".join(parts)


def compute(ctx: ScoreContext, groups, batch, names: list[str], options) -> Batch:
    """Runs the signals `names` in order; returns the batch extended with their fields.

    Args:
      ctx: the ScoreContext.
      groups: the step's (trimmed) `rollout.Groups`, aligned with `batch` row by row.
      batch: the Batch so far.
      names: signal names, in order.
      options: name -> that signal's options (`config.score.<name>`).
    Returns:
      The Batch with every provided field (a later signal overwrites an earlier one).
    """
    for name in names:
        fields = SIGNALS.get(name).fn(ctx, groups, batch, **options[name])
        want = set(provides(name))
        if set(fields) != want:
            raise RuntimeError(
                f"signal {name!r} returned fields {sorted(fields)}, declared {sorted(want)}"
            )
        batch = batch.with_extra(fields)
    return batch


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
