"""The rollout engine's requests, per-row results, and their assembly into a `Rollout`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from rlvr_jax.sampling.sampler import Rollout, _bucket


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


def rollout_from_results(
    requests: Sequence[Request],
    results: Mapping[int, RowResult],
    max_new_tokens: int,
    max_length: int,
    pad_id: int,
) -> Rollout:
    """`Sampler.sample`'s layout: row b = [left-padded context (bucket P) | N generated].

    Args:
      requests: the rows, in output order.
      results: {row_id: RowResult}.
      max_new_tokens: N, the width of the generated region.
      max_length: the context bucket is capped at max_length - N, as the Sampler does.
      pad_id: token id at padding positions.
    Returns:
      Rollout with B = len(requests) rows of L = P + N.
    """
    n, b = max_new_tokens, len(requests)
    longest = max(len(r.prompt) + len(r.prefix) for r in requests)
    p = min(_bucket(longest), max_length - n)
    tokens = np.full((b, p + n), pad_id, np.int32)
    prompt_mask, attn, resp = (np.zeros((b, p + n), bool) for _ in range(3))
    floats = np.zeros((3, b, p + n), np.float32)
    stopped = np.zeros((b,), bool)
    for i, r in enumerate(requests):
        out, ctx = results[r.row_id], list(r.prompt) + list(r.prefix)
        start, k = p - len(ctx), len(out.tokens)
        if k > n:
            raise ValueError(f"row {r.row_id}: {k} tokens for a generated region of {n}")
        tokens[i, start:p] = ctx
        prompt_mask[i, start : start + len(r.prompt)] = True
        attn[i, start : p + k] = True
        resp[i, p : p + k] = True
        tokens[i, p : p + k] = out.tokens
        for j, vals in enumerate((out.logps, out.sampling_logps, out.entropy)):
            floats[j, i, p : p + k] = vals
        stopped[i] = out.stopped
    return Rollout(
        tokens=tokens,
        attention_mask=attn,
        prompt_mask=prompt_mask,
        response_mask=resp,
        logps=floats[0],
        sampling_logps=floats[1],
        entropy=floats[2],
        group=np.array([r.group for r in requests], np.int32),
        stopped=stopped,
    )
