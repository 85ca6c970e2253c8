"""Rollout and score stages: sample G responses per prompt, verify them, shape the rewards.

`sample_groups` turns a `PromptBatch` into `Groups`: host (NumPy) arrays of
B·G rollouts in the sampler's [rows, L] layout with each row's verifier reward
and reason. `Groups` can be filtered by group (dynamic sampling), concatenated
across sampling rounds and padded to a fixed shape, so the jitted update sees
one shape per run whatever the selection did.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rlvr_jax.core.rewards import soft_overlong_penalty
from rlvr_jax.data.pipeline import PromptBatch
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT, Problem, Task
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train.evaluate import cut_at_stop
from rlvr_jax.train.sft import encode_prompt

_ROW_FIELDS = (
    "tokens",
    "attention_mask",
    "prompt_mask",
    "response_mask",
    "logps",
    "entropy",
)


@dataclasses.dataclass
class Groups:
    """Scored rollouts of P prompts (rows of a group contiguous), on the host.

    Attributes:
      tokens, attention_mask, prompt_mask, response_mask: [R, L] (sampler layout).
      logps: [R, L] float32 sampler log-probs of the sampled tokens at temperature 1.
      entropy: [R, L] float32 per-token entropy at sampling time.
      group: [R] int32 group index in [0, P).
      valid: [R] bool; False for padding rows (no loss, no statistics).
      rewards: [R] float32 shaped rewards; correct: [R] bool; stopped: [R] bool.
      reasons: R verifier reasons; problems: P problems.
    """

    tokens: np.ndarray
    attention_mask: np.ndarray
    prompt_mask: np.ndarray
    response_mask: np.ndarray
    logps: np.ndarray
    entropy: np.ndarray
    group: np.ndarray
    valid: np.ndarray
    rewards: np.ndarray
    correct: np.ndarray
    stopped: np.ndarray
    reasons: list[str]
    problems: list[Problem]

    @property
    def num_groups(self) -> int:
        return len(self.problems)

    @property
    def lengths(self) -> np.ndarray:
        """[R] int: sampled tokens per row."""
        return self.response_mask.sum(-1)

    def informative(self) -> np.ndarray:
        """[P] bool: groups whose valid rewards are not all equal (they carry a gradient)."""
        out = np.zeros(self.num_groups, bool)
        for g in range(self.num_groups):
            r = self.rewards[(self.group == g) & self.valid]
            out[g] = r.size > 1 and np.ptp(r) > 0
        return out

    def take_groups(self, keep: np.ndarray) -> Groups:
        """The groups listed in `keep` (indices), renumbered 0..len(keep)-1 in that order."""
        rows = np.concatenate([np.flatnonzero(self.group == g) for g in keep] or [[]]).astype(int)
        new_id = {int(g): i for i, g in enumerate(keep)}
        group = np.array([new_id[int(g)] for g in self.group[rows]], np.int32)
        return self._with_rows(rows, group, [self.problems[int(g)] for g in keep])

    def _with_rows(self, rows, group, problems) -> Groups:
        kw = {f: getattr(self, f)[rows] for f in _ROW_FIELDS}
        return Groups(
            **kw,
            group=group,
            valid=self.valid[rows],
            rewards=self.rewards[rows],
            correct=self.correct[rows],
            stopped=self.stopped[rows],
            reasons=[self.reasons[r] for r in rows],
            problems=problems,
        )

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
        lo = max(lo, 0) if lo >= 0 else 0
        kw = {f: getattr(out, f)[:, lo : lo + width] for f in _ROW_FIELDS}
        return dataclasses.replace(out, **kw)

    def pad_length(self, length: int) -> Groups:
        """Left-pads every [R, L] array to `length` columns (positions follow the mask)."""
        pad = length - self.tokens.shape[1]
        if pad < 0:
            raise ValueError(f"rows are {self.tokens.shape[1]} long; cannot pad to {length}")
        kw = {f: np.pad(getattr(self, f), ((0, 0), (pad, 0))) for f in _ROW_FIELDS}
        return dataclasses.replace(self, **kw)


def concat(parts: list[Groups]) -> Groups:
    """Groups of several rounds as one (group ids offset), padded to the longest L."""
    length = max(p.tokens.shape[1] for p in parts)
    parts = [p.pad_length(length) for p in parts]
    offsets = np.cumsum([0] + [p.num_groups for p in parts[:-1]])
    kw = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _ROW_FIELDS}
    return Groups(
        **kw,
        group=np.concatenate([p.group + o for p, o in zip(parts, offsets, strict=True)]).astype(
            np.int32
        ),
        valid=np.concatenate([p.valid for p in parts]),
        rewards=np.concatenate([p.rewards for p in parts]),
        correct=np.concatenate([p.correct for p in parts]),
        stopped=np.concatenate([p.stopped for p in parts]),
        reasons=[r for p in parts for r in p.reasons],
        problems=[q for p in parts for q in p.problems],
    )


def pad_groups(groups: Groups, num_groups: int, group_size: int) -> Groups:
    """Adds invalid padding groups (copies of row 0, masked out) up to `num_groups`."""
    missing = num_groups - groups.num_groups
    if missing < 0:
        raise ValueError(f"{groups.num_groups} groups exceed the batch of {num_groups}")
    if missing == 0:
        return groups
    rows = np.zeros(missing * group_size, int)
    group = np.repeat(np.arange(missing, dtype=np.int32), group_size)
    filler = groups._with_rows(rows, group, [groups.problems[0]] * missing)
    filler.valid = np.zeros(len(rows), bool)
    return concat([groups, filler])


def sample_groups(
    sampler: Sampler,
    tokenizer: Tokenizer,
    task: Task,
    batch: PromptBatch,
    params: SamplingParams,
    key: jax.Array,
    *,
    overlong_cache: int = 0,
    overlong_penalty: float = 1.0,
) -> Groups:
    """Samples `params.n` rollouts per prompt of `batch` and scores them with `task.verify`.

    Args:
      sampler: the policy's sampler (current weights).
      tokenizer: renders prompts (chat template), decodes responses, gives stop ids.
      task: the verifier.
      batch: P prompts.
      params: sampling parameters (n = G).
      key: PRNG key.
      overlong_cache: DAPO soft overlong penalty window L_cache (0 = off), with
        L_max = params.max_new_tokens.
      overlong_penalty: the penalty's scale.
    Returns:
      Groups with P·G rows; rewards = verifier reward + overlong penalty.
    """
    problems = batch.problems()
    prompts = [encode_prompt(tokenizer, p.prompt) for p in problems]
    ro = sampler.sample(prompts, params, key)
    rewards, correct, reasons = [], [], []
    for b in range(ro.tokens.shape[0]):
        text = tokenizer.decode(cut_at_stop(ro.sampled_tokens(b), params.stop_token_ids))
        verdict = task.verify(problems[int(ro.group[b])], text)
        rewards.append(verdict.reward)
        correct.append(verdict.reason == CORRECT)
        reasons.append(verdict.reason)
    rewards = np.asarray(rewards, np.float32)
    if overlong_cache:
        lengths = ro.response_mask.sum(-1)
        rewards = rewards + np.asarray(
            soft_overlong_penalty(
                lengths,
                max_len=params.max_new_tokens,
                cache_len=overlong_cache,
                penalty=overlong_penalty,
            )
        )
    return Groups(
        tokens=ro.tokens,
        attention_mask=ro.attention_mask,
        prompt_mask=ro.prompt_mask,
        response_mask=ro.response_mask,
        logps=ro.logps,
        entropy=ro.entropy,
        group=ro.group.astype(np.int32),
        valid=np.ones(len(rewards), bool),
        rewards=rewards,
        correct=np.asarray(correct, bool),
        stopped=np.asarray(ro.stopped, bool),
        reasons=reasons,
        problems=problems,
    )
