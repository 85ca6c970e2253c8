"""One sampling step: temperature, top-k, top-p and greedy, all as per-row data.

Every knob is an array, so changing it never recompiles; top-k/top-p filtering
(one sort over the vocabulary) only runs when some row asks for it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def filter_logits(scaled_BxV, top_k_B, top_p_B):
    """Masks logits outside each row's top-k / top-p (nucleus) set to -inf.

    Top-k is applied first, then top-p on the renormalised top-k distribution
    (the order transformers uses). The nucleus is the smallest prefix of the
    sorted distribution whose mass reaches top_p; the most likely token is always
    kept. Tokens tied with the last kept logit are kept too.

    Args:
      scaled_BxV: float32 logits, already divided by the temperature.
      top_k_B: int32, 0 (or >= V) disables top-k.
      top_p_B: float32 in (0, 1]; 1 disables top-p.
    Returns:
      float32 [B, V] logits with filtered entries at -inf.
    """
    v = scaled_BxV.shape[-1]
    sorted_BxV = -jnp.sort(-scaled_BxV, axis=-1)
    rank_V = jnp.arange(v)
    k_B = jnp.where((top_k_B > 0) & (top_k_B < v), top_k_B, v)
    in_k_BxV = rank_V[None, :] < k_B[:, None]
    probs_BxV = jax.nn.softmax(jnp.where(in_k_BxV, sorted_BxV, -jnp.inf), axis=-1)
    mass_before_BxV = jnp.cumsum(probs_BxV, axis=-1) - probs_BxV
    # p >= 1 must disable top-p exactly: float32 cumulative mass reaches 1.0 early.
    in_p_BxV = (mass_before_BxV < top_p_B[:, None]) | (top_p_B[:, None] >= 1.0)
    keep_BxV = in_k_BxV & (in_p_BxV | (rank_V[None, :] == 0))
    num_keep_B = keep_BxV.sum(axis=-1)
    threshold_B = jnp.take_along_axis(sorted_BxV, (num_keep_B - 1)[:, None], axis=-1)
    return jnp.where(scaled_BxV >= threshold_B, scaled_BxV, -jnp.inf)


def sample_step(key, logits_BxV, temperature_B, top_k_B, top_p_B):
    """Draws one token per row.

    Args:
      key: PRNG key for this step.
      logits_BxV: float32 next-token logits of the unmodified model.
      temperature_B: 0 means greedy (argmax).
      top_k_B, top_p_B: see filter_logits.
    Returns:
      tokens_B: int32 sampled ids.
      logp_B: log-prob of the token under the model at temperature 1 (what the
        trainer's teacher-forced pass computes).
      sampling_logp_B: log-prob under the distribution actually sampled from
        (temperature + filters; 0 for greedy rows).
      entropy_B: entropy of the model's temperature-1 distribution.
    """
    logits_BxV = logits_BxV.astype(jnp.float32)
    logp_BxV = jax.nn.log_softmax(logits_BxV, axis=-1)
    entropy_B = -jnp.sum(jnp.exp(logp_BxV) * logp_BxV, axis=-1)
    greedy_B = temperature_B <= 0
    scaled_BxV = logits_BxV / jnp.where(greedy_B, 1.0, temperature_B)[:, None]
    needs_filter = jnp.any(((top_k_B > 0) & (top_k_B < logits_BxV.shape[-1])) | (top_p_B < 1.0))
    scaled_BxV = jax.lax.cond(
        needs_filter, filter_logits, lambda s, *_: s, scaled_BxV, top_k_B, top_p_B
    )
    sampled_B = jax.random.categorical(key, scaled_BxV, axis=-1)
    tokens_B = jnp.where(greedy_B, jnp.argmax(logits_BxV, axis=-1), sampled_B).astype(jnp.int32)
    logp_B = jnp.take_along_axis(logp_BxV, tokens_B[:, None], axis=-1)[:, 0]
    sampling_lp_BxV = jax.nn.log_softmax(scaled_BxV, axis=-1)
    sampling_logp_B = jnp.take_along_axis(sampling_lp_BxV, tokens_B[:, None], axis=-1)[:, 0]
    sampling_logp_B = jnp.where(greedy_B, 0.0, sampling_logp_B)
    return tokens_B, logp_B, sampling_logp_B, entropy_B
