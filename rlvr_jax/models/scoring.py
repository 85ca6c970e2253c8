"""The one scoring interface: tokens -> per-token log-probs (and entropy, top-k) by teacher forcing.

The policy (trainer), the reference, teachers and self-teachers under a
privileged context all score through `token_logps`; the sampler reports its
log-probs in the same alignment, so the two agree to float rounding.

Alignment: `logps_BxT[b, t] = log p(tokens[b, t] | tokens[b, :t])`; a token with
no real token before it (position 0, the first token after left padding) and
padding positions are 0. (The first real token's only "context" would be the
output of padding positions, which differs between attention kernels.)

Scoring never builds the [B, T, V] float32 logits: the model returns its final
hidden states and `models.vocab` folds the output projection in vocabulary
chunks (forward and backward). `logps_from_logits` is the unchunked reference
for callers that already hold logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.models import vocab
from rlvr_jax.models.transformer import Transformer


def logps_from_logits(logits_BxTxV, tokens_BxT, attention_mask_BxT, *, with_entropy=False):
    """Per-token log-probs (and entropies) from next-token logits of a full forward pass.

    Args:
      logits_BxTxV: float logits; position t predicts token t+1.
      tokens_BxT: the scored tokens.
      attention_mask_BxT: 1 at real tokens.
      with_entropy: also return the entropy of each predictive distribution.
    Returns:
      logps_BxT float32 (and entropy_BxT float32): entry t scores token t.
    """
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV[:, :-1].astype(jnp.float32), axis=-1)
    lp_BxT1 = jnp.take_along_axis(logp_BxTxV, tokens_BxT[:, 1:, None], axis=-1)[..., 0]
    mask_BxT1 = _has_context(attention_mask_BxT)
    logps_BxT = jnp.pad(jnp.where(mask_BxT1, lp_BxT1, 0.0), ((0, 0), (1, 0)))
    if not with_entropy:
        return logps_BxT
    ent_BxT1 = -jnp.sum(jnp.exp(logp_BxTxV) * logp_BxTxV, axis=-1)
    return logps_BxT, jnp.pad(jnp.where(mask_BxT1, ent_BxT1, 0.0), ((0, 0), (1, 0)))


def _has_context(attention_mask_BxT):
    """[B, T-1]: token t+1 is real and some real token precedes it."""
    mask = attention_mask_BxT.astype(bool)
    before = jnp.cumsum(mask, axis=1)[:, :-1] > 0
    return mask[:, 1:] & before


def _hidden(model: Transformer, tokens_BxT, attention_mask_BxT):
    """Final hidden states of positions 0..T-2 (each predicts the next token)."""
    out = model.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
    return out.hidden[:, :-1]


def token_logps(
    model: Transformer,
    tokens_BxT,
    attention_mask_BxT,
    *,
    with_entropy=False,
    return_hidden=False,
    vocab_chunk: int = vocab.DEFAULT_CHUNK,
):
    """Teacher-forced log-probs of `tokens_BxT` under `model` (see module docstring).

    Args:
      model: the scoring model.
      tokens_BxT: context and response tokens in one row (any padding).
      attention_mask_BxT: 1 at real tokens.
      with_entropy: also return per-position entropies.
      return_hidden: also return hidden_BxTxD, aligned like the log-probs: entry t
        is the final hidden state that predicts token t (entry 0 is zeros); with
        `model.output_kernel()` it feeds `models.vocab` losses (reverse KL, top-k).
      vocab_chunk: vocabulary columns per chunk of the output projection.
    Returns:
      logps_BxT (and entropy_BxT, hidden_BxTxD, in that order when asked), float32
      log-probs and entropies, hidden in the model's compute dtype.
    """
    hidden = _hidden(model, tokens_BxT, attention_mask_BxT)
    lp, ent = vocab.token_logp_entropy(
        hidden, model.output_kernel(), tokens_BxT[:, 1:], chunk=vocab_chunk
    )
    mask = _has_context(attention_mask_BxT)
    pad = lambda x: jnp.pad(jnp.where(mask, x, 0.0), ((0, 0), (1, 0)))  # noqa: E731
    out = (pad(lp), pad(ent)) if with_entropy else (pad(lp),)
    if return_hidden:
        out += (jnp.pad(hidden, ((0, 0), (1, 0), (0, 0))),)
    return out if len(out) > 1 else out[0]


def topk_logps(
    model: Transformer, tokens_BxT, attention_mask_BxT, k: int, *, vocab_chunk=vocab.DEFAULT_CHUNK
):
    """The model's k most likely next tokens at every position, aligned like `token_logps`.

    Args:
      model, tokens_BxT, attention_mask_BxT, vocab_chunk: as in `token_logps`.
      k: how many tokens per position.
    Returns:
      (logps_BxTxK float32, ids_BxTxK int32): entry t is the distribution over
      token t given tokens[:t]; position 0 and padding positions are 0 / 0.
    """
    hidden = _hidden(model, tokens_BxT, attention_mask_BxT)
    lp, ids = vocab.topk_logps(hidden, model.output_kernel(), k, chunk=vocab_chunk)
    mask = _has_context(attention_mask_BxT)[..., None]
    pad = lambda x: jnp.pad(jnp.where(mask, x, 0), ((0, 0), (1, 0), (0, 0)))  # noqa: E731
    return pad(lp), pad(ids)
