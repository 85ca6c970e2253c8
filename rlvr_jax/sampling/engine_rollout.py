"""The rollout engine's requests (built, checked), per-row results, and their generated
regions (`Sampler` assembles the Rollout around them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from rlvr_jax.sampling.generate import MAX_STOP_IDS
from rlvr_jax.sampling.pages import PagePool
from rlvr_jax.sampling.rows import (
    Generated,
    SamplingParams,
)


@dataclasses.dataclass(frozen=True)
class Request:
    """One row to sample.

    Attributes:
      row_id: the caller's id; keys the row's random draws (distinct per call).
      prompt: prompt tokens (shared by every row of the group).
      group: rows of one group share the prompt, prefilled once for all of them.
      max_new_tokens: the row's decode budget.
      prefix: forced tokens after the prompt (neither prompt nor response).
      temperature, top_k, top_p: as in `SamplingParams` (per-row data).
      stop_token_ids: sampling one ends the row (kept in the response).
      noise_sigma: NC-GRPO latent noise σ on the row's context (0: none; the run's
        `noise_layer` says where); a noise row prefills its own context, sharing
        no pages with its group.
    """

    row_id: int
    prompt: tuple[int, ...]
    group: int
    max_new_tokens: int
    prefix: tuple[int, ...] = ()
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    noise_sigma: float = 0.0

    def __post_init__(self):
        if not 0 <= self.row_id < 2**31:
            raise ValueError(f"row id {self.row_id} outside [0, 2**31)")
        if not self.prompt or self.max_new_tokens < 1:
            raise ValueError(f"row {self.row_id}: needs a prompt token and max_new_tokens >= 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(
                f"row {self.row_id}: temperature={self.temperature} must be >= 0, "
                f"top_p={self.top_p} in (0, 1], top_k={self.top_k} >= 0"
            )
        if len(self.stop_token_ids) > MAX_STOP_IDS:
            raise ValueError(f"row {self.row_id}: at most {MAX_STOP_IDS} stop tokens")
        if not self.noise_sigma >= 0:
            raise ValueError(f"row {self.row_id}: noise_sigma={self.noise_sigma} must be >= 0")

    @classmethod
    def of(
        cls, row_id: int, prompt, group: int, prefix, params: SamplingParams, noise: bool = False
    ) -> Request:
        """A row with `params`' budget and knobs (the one place they are copied over);
        `noise`: a noise row (σ = params.prompt_noise_sigma)."""
        return cls(
            row_id=row_id,
            prompt=tuple(prompt),
            group=group,
            max_new_tokens=params.max_new_tokens,
            prefix=tuple(prefix),
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            stop_token_ids=tuple(params.stop_token_ids),
            noise_sigma=params.prompt_noise_sigma if noise else 0.0,
        )


@dataclasses.dataclass
class RowResult:
    """A finished row's sampled tokens and their per-token statistics."""

    tokens: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)  # temperature-1 model
    sampling_logps: list[float] = dataclasses.field(default_factory=list)
    entropy: list[float] = dataclasses.field(default_factory=list)
    stopped: bool = False  # ended with a stop token (not the token budget)

    def append(self, token: int, logp: float, sampling_logp: float, entropy: float) -> None:
        self.tokens.append(token)
        self.logps.append(logp)
        self.sampling_logps.append(sampling_logp)
        self.entropy.append(entropy)


def check_requests(
    requests: Sequence[Request], pool: PagePool, vocab_size: int, max_length: int
) -> None:
    """Raises ValueError for a batch the engine must refuse before running anything.

    Refused: repeated row ids, a group with two prompts, token ids outside the
    vocabulary, context + max_new_tokens past max_length, and a row whose cached
    slots (context + max_new_tokens - 1: the last sampled token is never fed
    back) can never fit the whole pool (`PagePool.check_fits`).
    """
    ids = [r.row_id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError("row ids repeat")
    prompts = {}
    for r in requests:
        ctx = len(r.prompt) + len(r.prefix)
        if ctx + r.max_new_tokens > max_length:
            raise ValueError(
                f"row {r.row_id}: context of {ctx} tokens + max_new_tokens="
                f"{r.max_new_tokens} exceeds max_length={max_length}"
            )
        bad = [t for t in (*r.prompt, *r.prefix) if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"row {r.row_id}: token id {bad[0]} outside the vocabulary")
        if prompts.setdefault(r.group, r.prompt) != r.prompt:
            raise ValueError(f"row {r.row_id}: group {r.group} has another prompt")
        pool.check_fits(r.row_id, ctx + r.max_new_tokens - 1)


def generated_arrays(
    rows: int, results: Mapping[int, RowResult], max_new_tokens: int, pad_id: int
) -> Generated:
    """Rows 0..rows-1's generated regions [rows, N] (a row without a result generated nothing).

    Raises:
      ValueError: a result longer than max_new_tokens.
    """
    n = max_new_tokens
    tokens = np.full((rows, n), pad_id, np.int32)
    valid = np.zeros((rows, n), bool)
    floats = np.zeros((3, rows, n), np.float32)
    stopped = np.zeros((rows,), bool)
    for b, out in results.items():
        k = len(out.tokens)
        if k > n:
            raise ValueError(f"row {b}: {k} tokens for a generated region of {n}")
        tokens[b, :k], valid[b, :k], stopped[b] = out.tokens, True, out.stopped
        for j, vals in enumerate((out.logps, out.sampling_logps, out.entropy)):
            floats[j, b, :k] = vals
    return Generated(tokens, valid, floats[0], floats[1], floats[2], stopped)
