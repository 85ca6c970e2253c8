"""Cliff: token advantages from the first mistake of each wrong rollout.

Cliff (seeds: "Cliff: Learning Process Rewards from the First Mistake") splits a
wrong rollout at its first mistaken token k: the prefix before k is a correct
partial solution and gets a positive advantage, the suffix from k on is
conditioned on an invalid prefix and gets a negative one. Fixed by the
abstract: prefix positive, suffix negative, correct rollouts unchanged. Ours
(docs/methods.md): magnitudes a = b = 1 scaled by |A_i|; a rollout whose locator
found no mistake keeps its estimator advantage A_i.

Index convention (shared with `om_grpo` and `cbpo`): `first_mistake_B[i]` counts
the row's *response tokens* (the positions where `mask_BxT` is True, in order),
0-based; −1 means "no mistake located". Counting response tokens, not columns,
makes the signal independent of the batch's padding layout: a scorer only
needs the response's own token ids. `response_positions` gives that count per
column.

From the arithmetic task's step verifier to the index (host side, by the score
stage): `tasks.arithmetic.first_wrong_step` returns `StepCheck.char_span`, a
(start, end) character span into the decoded response text. With per-token
character offsets of the response (`prefix_offsets`), the first mistaken token
is the first token that ends after `start` and is not zero-width
(`first_mistake_index`; the same token as `tasks.arithmetic.token_span(...)[0]`).
An empty span at the end of the text (missing steps / missing answer) maps to
the number of response tokens; the kernel clamps that to the last response
token (ours: the stop token, where the model ended too early, takes the
negative credit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax.numpy as jnp

_F32 = jnp.float32


def response_positions(mask_BxT):
    """0-based index of each masked-in token among its row's masked-in tokens.

    Args:
      mask_BxT: [B, T] bool (or 0/1) response/loss mask.
    Returns:
      (pos_BxT, n_B): int32 [B, T] index (−1 at masked positions) and int32 [B]
      number of masked-in tokens per row.
    """
    m = jnp.asarray(mask_BxT) != 0
    rank = jnp.cumsum(m.astype(jnp.int32), axis=-1) - 1
    return jnp.where(m, rank, -1), m.sum(-1).astype(jnp.int32)


def cliff_advantages(adv_BxT, mask_BxT, correct_B, first_mistake_B, *, a=1.0, b=1.0, scale=True):
    """Cliff's token advantages for wrong rollouts with a located first mistake.

    For a wrong rollout i with first mistaken response token k ≥ 0:
      A_{i,t} ← +a·|A_{i,t}|  for response tokens t < k   (correct prefix)
      A_{i,t} ← −b·|A_{i,t}|  for response tokens t ≥ k   (suffix from the mistake)
    With broadcast sequence advantages |A_{i,t}| = |A_i| (the paper's scaling);
    after an earlier token transform the per-token magnitude is kept (ours).
    `scale=False` (ours) uses ±a / ±b directly, which also gives signal to
    all-wrong groups, where |A_i| = 0. Correct rollouts, rollouts with
    k = −1 (no mistake found) and masked positions keep their input values.

    Args:
      adv_BxT: [B, T] token advantages from the estimator (A_i broadcast).
      mask_BxT: [B, T] bool response/loss mask.
      correct_B: [B] bool verifier verdict.
      first_mistake_B: [B] int first mistaken response-token index (module doc),
        −1 if none; values ≥ the row's response length clamp to its last token.
      a: prefix magnitude (ours: 1).
      b: suffix magnitude (ours: 1).
      scale: static; multiply by |A_{i,t}| (paper) or not.
    Returns:
      adv_BxT: float32 [B, T], 0 at masked positions.
    """
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    pos_BxT, n_B = response_positions(m)
    k_B = jnp.asarray(first_mistake_B, jnp.int32)
    k_B = jnp.minimum(k_B, n_B - 1)
    located_B = (~jnp.asarray(correct_B, bool)) & (k_B >= 0)
    mag = jnp.abs(adv) if scale else jnp.ones_like(adv)
    shaped = jnp.where(pos_BxT < k_B[:, None], a * mag, -b * mag)
    return jnp.where(located_B[:, None] & m, shaped.astype(_F32), adv)


def prefix_offsets(decode: Callable[[list[int]], str], ids: Sequence[int]) -> list[tuple[int, int]]:
    """Per-token character offsets of a decoded response, from prefix decodes (host side).

    Token i covers [len(decode(ids[:i])), len(decode(ids[:i+1]))): robust to
    tokenizers whose single-token decode differs from its contribution in
    context (SentencePiece's leading-space marker). O(n²) characters, fine for
    the response lengths of the step-trace tasks.

    Args:
      decode: ids -> text, the same decode that produced the text the locator read.
      ids: the response token ids.
    Returns:
      [(start, end)] per token, non-decreasing.
    """
    out, prev = [], 0
    for i in range(len(ids)):
        end = max(len(decode(list(ids[: i + 1]))), prev)
        out.append((prev, end))
        prev = end
    return out


def first_mistake_index(
    char_span: tuple[int, int] | None, offsets: Sequence[tuple[int, int]]
) -> int:
    """The response-token index of a locator's character span (host side).

    Args:
      char_span: (start, end) of the first wrong step in the response text, e.g.
        `tasks.arithmetic.first_wrong_step(...).char_span`; None when the locator
        found no mistake.
      offsets: per-token (start, end) character offsets of that text.
    Returns:
      −1 for None; else the first non-empty token ending after `start`
      (len(offsets) when the span lies past the last token).
    """
    if char_span is None:
        return -1
    start = int(char_span[0])
    return next((i for i, (s, e) in enumerate(offsets) if e > start and e > s), len(offsets))
