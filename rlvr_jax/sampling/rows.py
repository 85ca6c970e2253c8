"""A rollout's rows: how to sample them (`SamplingParams`), the returned batch
(`Rollout`), and its assembly from contexts and generated regions, shared by the
static `Sampler` path and the paged engine.

Layout (the trainer's, see docs/design.md): row b is `[left-padded context |
generated region]` of length L = P + N, P the longest context rounded up by
`context_bucket` (capped at max_length - N), N = max_new_tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from rlvr_jax.sampling.generate import MAX_STOP_IDS


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample. All fields but `max_new_tokens`/`n` are runtime data.

    Attributes:
      temperature: 0 = greedy.
      top_k: keep the k most likely tokens (0 = off).
      top_p: nucleus mass (1 = off).
      max_new_tokens: N, the decode budget (static: sets buffer shapes).
      stop_token_ids: sampling one of these ends the row (it is kept in the response).
      n: samples per prompt (one group per prompt, rows grouped consecutively).
      prompt_noise_sigma: NC-GRPO latent noise (units of hidden RMS) added to
        context positions at `prompt_noise_layer` during prefill, for the rows
        where `noise_rows` (a per-row bool list passed to `sample`) is set.
      prompt_noise_layer: block after which the noise is added (-1 = last).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    n: int = 1
    prompt_noise_sigma: float = 0.0
    prompt_noise_layer: int = -1

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"invalid top_k/max_new_tokens/n in {self}")
        if len(self.stop_token_ids) > MAX_STOP_IDS:
            raise ValueError(f"at most {MAX_STOP_IDS} stop tokens, got {self.stop_token_ids}")


@dataclasses.dataclass
class Rollout:
    """Sampled sequences on the host (NumPy), in the trainer's [B, L] layout.

    `logps`, `sampling_logps` and `entropy` are aligned like the scoring
    interface: entry t belongs to token t; they are 0 outside `response_mask`.
    """

    tokens: np.ndarray  # [B, L] int32
    attention_mask: np.ndarray  # [B, L] bool
    prompt_mask: np.ndarray  # [B, L] bool
    response_mask: np.ndarray  # [B, L] bool
    logps: np.ndarray  # [B, L] float32, temperature-1 model log-probs
    sampling_logps: np.ndarray  # [B, L] float32, log-probs under the sampling distribution
    entropy: np.ndarray  # [B, L] float32, entropy of the temperature-1 distribution
    group: np.ndarray  # [B] int32, index of the prompt each row answers
    stopped: np.ndarray  # [B] bool, the last turn ended with a stop token

    @property
    def forced_mask(self) -> np.ndarray:
        return self.attention_mask & ~self.prompt_mask & ~self.response_mask

    def response_tokens(self, b: int) -> list[int]:
        """Tokens after the prompt in row b (sampled and forced, in order)."""
        keep = self.attention_mask[b] & ~self.prompt_mask[b]
        return self.tokens[b][keep].tolist()

    def sampled_tokens(self, b: int) -> list[int]:
        return self.tokens[b][self.response_mask[b]].tolist()


def context_bucket(length: int, minimum: int = 16) -> int:
    """Next power of two (>= minimum): few distinct shapes, so few compiles."""
    return max(minimum, 1 << max(0, (length - 1)).bit_length())


@dataclasses.dataclass
class Generated:
    """The generated regions of B rows, [B, N] each (what one sampling path returns)."""

    tokens: np.ndarray  # int32, pad past a row's end
    valid: np.ndarray  # bool, generated tokens
    logps: np.ndarray  # float32
    sampling_logps: np.ndarray  # float32
    entropy: np.ndarray  # float32
    stopped: np.ndarray  # [B] bool


def assemble_rollout(
    contexts: Sequence[Sequence[int]],
    roles: Sequence[Sequence[int]],
    context_floats: Sequence[Sequence[np.ndarray]],
    group,
    p: int,
    pad_id: int,
    gen: Generated,
    prev_stopped=None,
    carried=None,
) -> Rollout:
    """The Rollout of rows `[context left-padded to p | gen]`.

    Args:
      contexts: each row's context tokens (len <= p).
      roles: per context token, 0 prompt, 1 forced, 2 sampled in an earlier turn.
      context_floats: (logps, sampling_logps, entropy) per row of its context (kept
        where the role is 2, zero elsewhere).
      group: [B] prompt index of each row.
      p: the context width P.
      pad_id: token id at padding positions.
      gen: the generated regions.
      prev_stopped, carried: for a continuation, the previous turn's stop flags and
        the [B] rows carried unchanged (their flag is kept).
    """
    bsz = len(contexts)
    ctx = np.full((bsz, p), pad_id, np.int32)
    role = np.full((bsz, p), -1, np.int8)  # -1 pad, 0 prompt, 1 forced, 2 sampled
    ctx_f = np.zeros((3, bsz, p), np.float32)
    for b, c in enumerate(contexts):
        if c:
            ctx[b, p - len(c) :] = c
            role[b, p - len(c) :] = roles[b]
            for i in range(3):
                ctx_f[i, b, p - len(c) :] = context_floats[i][b]
    sampled = role == 2
    stopped = gen.stopped
    if prev_stopped is not None:
        stopped = np.where(carried, prev_stopped, stopped)
    return Rollout(
        tokens=np.concatenate([ctx, gen.tokens], axis=1),
        attention_mask=np.concatenate([role >= 0, gen.valid], axis=1),
        prompt_mask=np.concatenate([role == 0, np.zeros_like(gen.valid)], axis=1),
        response_mask=np.concatenate([sampled, gen.valid], axis=1),
        logps=np.concatenate([np.where(sampled, ctx_f[0], 0), gen.logps], axis=1),
        sampling_logps=np.concatenate([np.where(sampled, ctx_f[1], 0), gen.sampling_logps], axis=1),
        entropy=np.concatenate([np.where(sampled, ctx_f[2], 0), gen.entropy], axis=1),
        group=np.asarray(group, np.int32),
        stopped=stopped,
    )
