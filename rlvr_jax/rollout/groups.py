"""`Groups`: scored rollouts on the host, the rollout stage's output.

A rollout plug-in (`rlvr_jax.rollout.ROLLOUTS`) turns a `Request` into Groups:
NumPy arrays of R rows in the sampler's [rows, L] layout (left-padded context,
then the generated region) with each row's verdict. Forced tokens (a prefix the
sampler was given, environment observations) are in `attention_mask` but never
in `response_mask`: the loss and the log-probs cover only what the policy
sampled. Groups can be trimmed to the columns some row uses and padded, so the
jitted update sees few shapes.

A plug-in whose rows of one requested group are not all alike (SpyRL's game:
describe and vote turns of civilians and of the spy) says which rows compare in
`info[SUBGROUP]` ([R] int, contiguous runs within each group); the select stage's
packing then makes every (group, subgroup) pair a group of its own
(`Groups.split_subgroups`), so advantages compare like with like.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr_jax.tasks.base import Problem

# Groups.info key of a plug-in's sub-grouping of each requested group (`split_subgroups`).
SUBGROUP = "subgroup_B"
# Groups.info keys that label rows (ids, not quantities): the trainer logs no mean of them.
LABEL_FIELDS = frozenset({SUBGROUP, "branch_id_B", "branch_parent_B"})
# [R, L] arrays, in the sampler's layout.
ROW_FIELDS = (
    "tokens",
    "attention_mask",
    "prompt_mask",
    "response_mask",
    "behaviour_logps",
    "entropy",
)


@dataclasses.dataclass
class Groups:
    """Scored rollouts of P groups (rows of a group contiguous), on the host.

    Attributes:
      tokens, attention_mask, prompt_mask, response_mask: [R, L] (sampler layout).
      behaviour_logps: [R, L] float32 log μ of each sampled token: the temperature-1
        log-prob under the policy (weights and context) that generated it; 0 off
        `response_mask`.
      entropy: [R, L] float32 per-token entropy at sampling time.
      group: [R] int32 group index in [0, P).
      valid: [R] bool; False for padding rows (no loss, no statistics).
      rewards: [R] float32 shaped rewards; correct: [R] bool; stopped: [R] bool.
      reasons: R verifier reasons; problems: P problems.
      info: per-row [R] arrays a rollout plug-in reports (e.g. turns per episode);
        they become batch fields of the same name.
      off_batch: (rollouts, response tokens) a rollout plug-in generated for these
        groups that are not rows of them (LSPO's adapter re-rolls that were not
        spliced in); the select stage adds them to the step's budget counts.
    """

    tokens: np.ndarray
    attention_mask: np.ndarray
    prompt_mask: np.ndarray
    response_mask: np.ndarray
    behaviour_logps: np.ndarray
    entropy: np.ndarray
    group: np.ndarray
    valid: np.ndarray
    rewards: np.ndarray
    correct: np.ndarray
    stopped: np.ndarray
    reasons: list[str]
    problems: list[Problem]
    info: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    off_batch: tuple[int, int] = (0, 0)

    @property
    def num_groups(self) -> int:
        return len(self.problems)

    @property
    def lengths(self) -> np.ndarray:
        """[R] int: sampled tokens per row."""
        return self.response_mask.sum(-1)

    def row(self, r: int) -> dict:
        """Row r as a dict of its arrays and verdict (see `stack_rows`)."""
        out = {f: getattr(self, f)[r] for f in ROW_FIELDS}
        out.update(reward=float(self.rewards[r]), correct=bool(self.correct[r]))
        out.update(stopped=bool(self.stopped[r]), reason=self.reasons[r])
        out["info"] = {k: v[r] for k, v in self.info.items()}
        return out

    def replace_rows(self, pairs, other: Groups, off_batch: tuple[int, int]) -> Groups:
        """Self with row `slot` replaced by `other`'s row `src` for each (slot, src) in
        `pairs`, without `info` (the caller sets it for the new rows), and `off_batch`
        the (rollouts, tokens) generated for this batch beyond its rows."""
        out = [dict(self.row(r), info={}) for r in range(len(self.group))]
        for slot, src in pairs:
            out[slot] = dict(other.row(src), info={})
        groups = stack_rows(out, self.group, self.valid, self.problems)
        groups.off_batch = off_batch
        return groups

    def with_prompts(self, rows_R: np.ndarray, prompts_R) -> Groups:
        """The rows `rows_R` (bool [R]) with their prompt replaced by `prompts_R[r]`.

        Everything after a row's prompt (forced and sampled tokens, their
        log-probs and entropies) is kept verbatim; rows are left-padded to one
        width. OC-GRPO trains guided rows on the unguided prompt this way.
        """
        out = []
        for r in range(len(self.tokens)):
            row = self.row(r)
            if rows_R[r]:
                prompt = np.asarray(prompts_R[r], self.tokens.dtype)
                pm = row["prompt_mask"]
                start = int(np.flatnonzero(pm)[-1]) + 1 if pm.any() else 0
                ones = np.ones(len(prompt), bool)
                fill = {"tokens": prompt, "attention_mask": ones, "prompt_mask": ones}
                for f in ROW_FIELDS:
                    head = fill.get(f, np.zeros(len(prompt), row[f].dtype))
                    row[f] = np.concatenate([head, row[f][start:]])
            out.append(row)
        return stack_rows(out, self.group, self.valid, self.problems)

    def split_subgroups(self) -> Groups:
        """Every (group, info[SUBGROUP]) pair made a group of its own; self without the field.

        Groups are renumbered in order of their first row; each new group's problem is
        its old group's. The rows stay in place, so a sub-group must be a contiguous run
        of rows (ValueError otherwise: row order is the "rows of a group contiguous"
        contract).
        """
        if SUBGROUP not in self.info:
            return self
        info = dict(self.info)
        sub = np.asarray(info.pop(SUBGROUP))
        pairs = list(zip(self.group.tolist(), sub.tolist(), strict=True))
        starts = [r for r in range(len(pairs)) if r == 0 or pairs[r] != pairs[r - 1]]
        if len({pairs[r] for r in starts}) != len(starts):
            raise ValueError(f"info[{SUBGROUP!r}]: a (group, subgroup) pair is not contiguous")
        first = np.zeros(len(pairs), bool)
        first[starts] = True
        new = np.cumsum(first) - 1
        problems = [self.problems[self.group[r]] for r in starts]
        return dataclasses.replace(self, group=new.astype(np.int32), problems=problems, info=info)

    def used_span(self) -> tuple[int, int] | None:
        """(first, last + 1) of the columns some row uses; None when no row uses any."""
        used = np.flatnonzero(self.attention_mask.any(0))
        return None if used.size == 0 else (int(used[0]), int(used[-1]) + 1)

    def trim(self, multiple: int = 16, span: tuple[int, int] | None = None) -> Groups:
        """Drops the columns that are padding in every row, keeping a multiple of `multiple`.

        The sampler's rows are [context bucket | generation budget]; most rows stop
        well before the budget, so training on the trimmed width saves compute.
        Rounding the width up keeps the number of distinct (compiled) shapes small.

        Args:
          multiple: the kept width is rounded up to a multiple of this.
          span: the (lo, hi) columns to keep (default `used_span()`); a wider span
            than this batch's own lets several batches agree on one shape.
        """
        span = self.used_span() if span is None else span
        if span is None:
            return self
        lo, hi = span
        width = -(-(hi - lo) // multiple) * multiple
        lo = hi - width
        out = self if lo >= 0 else self.pad_length(self.tokens.shape[1] - lo)
        lo = max(lo, 0)
        kw = {f: getattr(out, f)[:, lo : lo + width] for f in ROW_FIELDS}
        return dataclasses.replace(out, **kw)

    def pad_length(self, length: int) -> Groups:
        """Left-pads every [R, L] array to `length` columns (positions follow the mask)."""
        pad = length - self.tokens.shape[1]
        if pad < 0:
            raise ValueError(f"rows are {self.tokens.shape[1]} long; cannot pad to {length}")
        kw = {f: np.pad(getattr(self, f), ((0, 0), (pad, 0))) for f in ROW_FIELDS}
        return dataclasses.replace(self, **kw)


def stack_rows(
    rows: list[dict], group: np.ndarray, valid: np.ndarray, problems: list[Problem]
) -> Groups:
    """Groups from row dicts (`Groups.row`), left-padded to the longest row.

    Args:
      rows: R row dicts; rows without a verdict ("reward" missing) count as reward
        0, wrong, reason "".
      group: [R] int32 group ids; valid: [R] bool.
      problems: the problem of each group.
    """
    width = max(len(r["tokens"]) for r in rows)

    def stack(field):
        return np.stack([np.pad(r[field], (width - len(r[field]), 0)) for r in rows])

    info_keys = rows[0]["info"].keys() if rows else ()
    return Groups(
        **{f: stack(f) for f in ROW_FIELDS},
        group=np.asarray(group, np.int32),
        valid=np.asarray(valid, bool),
        rewards=np.array([r.get("reward", 0.0) for r in rows], np.float32),
        correct=np.array([r.get("correct", False) for r in rows], bool),
        stopped=np.array([r["stopped"] for r in rows], bool),
        reasons=[r.get("reason", "") for r in rows],
        problems=list(problems),
        info={k: np.stack([r["info"][k] for r in rows]) for k in info_keys},
    )
