"""GRSD: turn-level modulation of outcome advantages by a guided self-teacher (sign kept).

GRSD (seeds: "Group-Reflective Self-Distillation for Agentic Reinforcement
Learning") conditions the policy on group guidance distilled from its own
reflections (a self-teacher) and lets it refine turn-level credit: outcome
advantages are modulated while the verifier's learning direction is kept.

Here a turn is a maximal run of consecutive response tokens (a multi-turn
episode's turns are separated by environment tokens outside the mask; a
single-turn response is one turn). For turn u of row b,

  gap_u = mean_{t ∈ u} (ℓ^T_t − ℓ^S_t)        (ℓ^T: the self-teacher under guidance)
  w_u   = clip(exp(λ · sign(A_t) · gap_u), w_min, w_max),   A'_t = w_u · A_t.

A turn the guidance makes more likely is reinforced more when its advantage is
positive and penalised less when negative (and the reverse for a turn the
guidance makes less likely). w > 0, so no advantage changes sign. Ours (the
abstract gives no formula): the exponential of the mean log-prob gap (the
geometric-mean likelihood ratio), λ = 1, w in [0.5, 2].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_F32 = jnp.float32


def turn_ids(mask_BxT):
    """Index of the turn (maximal run of mask tokens) of each token; −1 off the mask.

    Args:
      mask_BxT: [B, T] bool response mask.
    Returns:
      int32 [B, T].
    """
    m = jnp.asarray(mask_BxT) != 0
    prev = jnp.pad(m[:, :-1], ((0, 0), (1, 0)))
    starts = m & ~prev
    return jnp.where(m, jnp.cumsum(starts.astype(jnp.int32), axis=-1) - 1, -1)


def turn_gaps(teacher_logps_BxT, student_logps_BxT, mask_BxT):
    """Each token's turn-mean log-prob gap mean_{t ∈ turn} (ℓ^T_t − ℓ^S_t); 0 off the mask.

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] log-probs of the sampled tokens.
      mask_BxT: [B, T] bool response mask.
    Returns:
      float32 [B, T].
    """
    m = jnp.asarray(mask_BxT) != 0
    d = jnp.where(m, jnp.asarray(teacher_logps_BxT, _F32) - jnp.asarray(student_logps_BxT, _F32), 0)
    turn = turn_ids(m)
    n_turns = m.shape[1]  # a row of T columns has at most ⌈T / 2⌉ turns

    def per_row(d_T, turn_T, m_T):
        seg = jnp.where(m_T, turn_T, n_turns)  # off-mask tokens go to a dropped segment
        s = jax.ops.segment_sum(d_T, seg, num_segments=n_turns + 1)
        c = jax.ops.segment_sum(m_T.astype(_F32), seg, num_segments=n_turns + 1)
        return jnp.where(m_T, (s / jnp.maximum(c, 1.0))[seg], 0.0)

    return jax.vmap(per_row)(d, turn, m)


def grsd_advantages(
    adv_BxT, teacher_logps_BxT, student_logps_BxT, mask_BxT, *, lam=1.0, w_min=0.5, w_max=2.0
):
    """GRSD's modulated advantages A'_t = clip(exp(λ·sign(A_t)·gap_turn), w_min, w_max) · A_t.

    Args:
      adv_BxT: [B, T] outcome advantages.
      teacher_logps_BxT: [B, T] ℓ^T, the self-teacher's (policy under guidance).
      student_logps_BxT: [B, T] ℓ^S, the policy's (old log-probs).
      mask_BxT: [B, T] bool response mask.
      lam: λ, the modulation strength (0: A unchanged).
      w_min, w_max: the weight's clip; w_min > 0 keeps every sign.
    Returns:
      (adv_BxT, w_BxT): float32 modulated advantages (0 off the mask) and weights.
    """
    if all(isinstance(x, int | float) for x in (w_min, w_max)) and not 0 < w_min <= 1 <= w_max:
        raise ValueError(f"grsd: need 0 < w_min <= 1 <= w_max, got w_min={w_min}, w_max={w_max}")
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    gap = turn_gaps(teacher_logps_BxT, student_logps_BxT, m)
    w = jnp.clip(jnp.exp(lam * jnp.sign(adv) * gap), w_min, w_max)
    w = jnp.where(m, w, 1.0)
    return jnp.where(m, w * adv, 0.0), w
