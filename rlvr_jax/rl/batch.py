"""The training batch: one typed pytree that the score, credit and update stages extend.

`Batch` declares the fields the trainer fills, once; fields a score signal or
the scheduler provides (teacher log-probs, PAIR's inclusion probabilities, ...)
live in `extra` under the names their provider declares. Stages read fields by
name, `batch["mask_BxT"]`, and return extended copies (`batch.replace(...)`,
`batch.with_extra(...)`). Step-level values (the step number, schedules) are
arguments of the stages, never batch fields. Shapes are in the names: B rows,
T columns, other letters for other dimensions (`branch_member_KxB`).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import struct

# A batch field: host (NumPy) or device (jax) array; its shape is in its name.
Array = np.ndarray | jax.Array


@struct.dataclass
class Batch:
    """The rows of one RL step, host (NumPy) or device arrays.

    Attributes (score stage unless noted; None = not computed):
      tokens_BxT, attention_mask_BxT: int32 ids (context, response), bool real tokens.
      mask_BxT: bool loss mask: the sampled response tokens of valid rows.
      behaviour_logps_BxT: float32 log μ: the log-prob the rollout sampled each token with.
      old_logps_BxT: float32 log π_old of the tokens (μ for the plain rollout unless
        `loss.recompute_old_logps`); entropy_BxT: float32 entropy at each token.
      rewards_B: float32 shaped rewards; correct_B: bool verdicts; group_B: int32
        group ids; valid_B: bool, real (not padding) rows.
      ref_logps_BxT: reference log-probs (KL); old_values_BxT: critic values.
      adv_BxT, returns_BxT: the credit stage's advantages and critic targets.
      extra: fields of score signals and the scheduler, by name.
    """

    tokens_BxT: Array
    attention_mask_BxT: Array
    mask_BxT: Array
    behaviour_logps_BxT: Array
    old_logps_BxT: Array
    entropy_BxT: Array
    rewards_B: Array
    correct_B: Array
    group_B: Array
    valid_B: Array
    ref_logps_BxT: Array | None = None
    old_values_BxT: Array | None = None
    adv_BxT: Array | None = None
    returns_BxT: Array | None = None
    extra: dict[str, Array] = struct.field(default_factory=dict)

    def __getitem__(self, name: str):
        if name in FIELDS:
            value = getattr(self, name)
            if value is not None:
                return value
        elif name in self.extra:
            return self.extra[name]
        raise KeyError(f"the batch has no field {name!r}; it has {sorted(self.names())}")

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def names(self) -> list[str]:
        """The fields that hold a value, declared and extra."""
        return [f for f in FIELDS if getattr(self, f) is not None] + list(self.extra)

    def with_extra(self, fields: dict[str, Array]) -> Batch:
        """A copy with `fields` added: declared names replace their field, others go to extra.

        A per-row field (`is_row_field`: shape suffix B or Bx...) must have the batch's
        rows; ValueError naming it otherwise.
        """
        rows = len(self.tokens_BxT)
        for name, value in fields.items():
            if is_row_field(name) and len(value) != rows:
                raise ValueError(
                    f"batch field {name!r} has {len(value)} rows; the batch has {rows}"
                )
        declared = {k: v for k, v in fields.items() if k in FIELDS}
        extra = {k: v for k, v in fields.items() if k not in FIELDS}
        return self.replace(**declared, extra={**self.extra, **extra})

    def rows(self) -> Batch:
        """The batch without extra fields that are not per row (names ending `_B` / `_BxT`)."""
        return self.replace(extra={k: v for k, v in self.extra.items() if is_row_field(k)})


FIELDS = tuple(f.name for f in dataclasses.fields(Batch) if f.name != "extra")
# What the update stage adds for the losses that declare them (`rl.methods.distill`):
# the student's final hidden states, its output kernel and the teacher's.
UPDATE_FIELDS = ("hidden_BxTxD", "output_kernel_DxV", "teacher_kernel_DxV")


def is_row_field(name: str) -> bool:
    """A field whose leading dimension is the batch's rows (its shape suffix starts with B)."""
    suffix = name.rsplit("_", 1)[-1]
    return suffix == "B" or suffix.startswith("Bx")


def from_groups(groups, mask_BxT=None, old_logps_BxT=None, extra=None) -> Batch:
    """The score stage's first Batch of a step's `rollout.Groups`.

    Args:
      groups: the rows (their `info` arrays become extra fields).
      mask_BxT: the loss mask (default: the response tokens of valid rows).
      old_logps_BxT: log π_old (default: the behaviour log-probs μ).
      extra: more fields (e.g. the scheduler's).
    Returns:
      A Batch without ref_logps / values / advantages.
    """
    if mask_BxT is None:
        mask_BxT = groups.response_mask & groups.valid[:, None]
    return Batch(
        tokens_BxT=groups.tokens,
        attention_mask_BxT=groups.attention_mask,
        mask_BxT=mask_BxT,
        behaviour_logps_BxT=groups.behaviour_logps,
        old_logps_BxT=groups.behaviour_logps if old_logps_BxT is None else old_logps_BxT,
        entropy_BxT=groups.entropy,
        rewards_B=groups.rewards,
        correct_B=groups.correct,
        group_B=groups.group,
        valid_B=groups.valid,
        extra={**groups.info, **(extra or {})},
    )
