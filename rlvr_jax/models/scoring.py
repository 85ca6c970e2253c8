"""The one scoring interface: tokens -> per-token log-probs (and entropy) by teacher forcing.

The policy (trainer), the reference, teachers and self-teachers under a
privileged context all score through `token_logps`; the sampler reports its
log-probs in the same alignment, so the two agree to float rounding.

Alignment: `logps_BxT[b, t] = log p(tokens[b, t] | tokens[b, :t])`; position 0
and padding positions are 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
    mask_BxT1 = attention_mask_BxT[:, 1:].astype(bool)
    logps_BxT = jnp.pad(jnp.where(mask_BxT1, lp_BxT1, 0.0), ((0, 0), (1, 0)))
    if not with_entropy:
        return logps_BxT
    ent_BxT1 = -jnp.sum(jnp.exp(logp_BxTxV) * logp_BxTxV, axis=-1)
    return logps_BxT, jnp.pad(jnp.where(mask_BxT1, ent_BxT1, 0.0), ((0, 0), (1, 0)))


def token_logps(model: Transformer, tokens_BxT, attention_mask_BxT, *, with_entropy=False):
    """Teacher-forced log-probs of `tokens_BxT` under `model` (see module docstring).

    Args:
      model: the scoring model.
      tokens_BxT: context and response tokens in one row (any padding).
      attention_mask_BxT: 1 at real tokens.
      with_entropy: also return per-position entropies.
    Returns:
      logps_BxT (and entropy_BxT), float32.
    """
    logits = model(tokens_BxT, attention_mask=attention_mask_BxT)
    return logps_from_logits(logits, tokens_BxT, attention_mask_BxT, with_entropy=with_entropy)
