"""SAF-OPD: Stable Advantage Fusion of the RLVR and OPD advantages.

  A_t = A_GRPO,t + w(s)·C(S(A_OPD,t)),    A_OPD,t = ℓ^T_t − ℓ^S_t,

with the pipeline applied to the OPD advantage only, each stage switchable
(off = identity, or w constant):

  S  sparsify: keep the top fraction ρ of OPD tokens by |A_OPD|, zero the rest
     (magnitude control: spikes are few, most tokens carry little).
  C  compress: bounded map to the RLVR advantage scale, C(x) = s·tanh(x/s).
  w  warm-up then anneal over the training step s (temporal control: full
     strength early, fading so RL can explore beyond the teacher).

The abstract fixes the four stages and their order; the numbers are ours:
ρ = 0.2 over the batch's response tokens; s = mean |A_GRPO| over the batch's
tokens with A ≠ 0 (1 when there are none, e.g. all groups zero-variance);
w rises linearly from 0 to w_max over the warm-up, holds, then falls linearly
to w_end over the anneal (defaults w_max = 1, w_end = 0, 10 / 0 / 100 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import opd

# Pulls ρ·n just below an integer it should equal, so float32 rounding of the
# product (e.g. 0.2·10 = 2.0000000298) never keeps one extra token.
_ROUND_DOWN = 1.0 - 1e-6


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def top_fraction_mask(values_BxT, mask_BxT, frac, *, per_row: bool = False):
    """The masked entries whose value is among the ceil(ρ·n) largest.

    n counts the masked entries of the batch (or of each row with per_row);
    entries tied with the k-th largest are all kept; at least one entry is
    kept when n > 0 and ρ > 0. Sort-based: O(n log n), no loops.

    Args:
      values_BxT: [B, T] float scores (e.g. |A_OPD|).
      mask_BxT: [B, T] bool or {0, 1}.
      frac: ρ in [0, 1] (may be traced); 1 keeps every masked entry, 0 none.
      per_row: static; rank within each row instead of over the whole batch.
    Returns:
      keep_BxT: bool [B, T], False off the mask.
    """
    m = _mask(mask_BxT)
    v = jnp.where(m, jnp.asarray(values_BxT, jnp.float32), -jnp.inf)
    if per_row:
        n = m.sum(-1, keepdims=True).astype(jnp.float32)
        desc = -jnp.sort(-v, axis=-1)
    else:
        n = m.sum().astype(jnp.float32)
        desc = -jnp.sort(-v.reshape(-1))
    k = jnp.clip(jnp.ceil(frac * n * _ROUND_DOWN), 1.0, jnp.maximum(n, 1.0))
    idx = (k - 1.0).astype(jnp.int32)
    thr = jnp.take_along_axis(desc, idx, axis=-1) if per_row else desc[idx]
    return m & (v >= thr) & (n > 0) & (frac > 0)


def rl_advantage_scale(adv_BxT, mask_BxT):
    """s: the mean |A| over masked tokens with A ≠ 0; 1 when there are none (ours).

    Args:
      adv_BxT: [B, T] RLVR token advantages.
      mask_BxT: [B, T] bool or {0, 1}.
    Returns:
      float32 scalar > 0.
    """
    m = _mask(mask_BxT)
    a = jnp.abs(jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0))
    n = jnp.sum(a > 0).astype(jnp.float32)
    return jnp.where(n > 0, a.sum() / jnp.maximum(n, 1.0), 1.0)


def fusion_weight(step, *, w_max=1.0, w_end=0.0, warmup_steps=10, hold_steps=0, anneal_steps=100):
    """w(s): linear warm-up 0 → w_max, hold, linear anneal w_max → w_end, then w_end.

    Args:
      step: training step s ≥ 0 (int or scalar array; may be traced).
      w_max: peak weight.
      w_end: final weight after the anneal.
      warmup_steps: steps to reach w_max (0: start at w_max); w(s) = w_max·s/warmup.
      hold_steps: steps at w_max after the warm-up.
      anneal_steps: steps of the linear decay (0: drop to w_end at once).
    Returns:
      float32 scalar.
    """
    s = jnp.asarray(step, jnp.float32)
    t = s - warmup_steps - hold_steps  # steps into the anneal
    frac = jnp.clip(t / anneal_steps, 0.0, 1.0) if anneal_steps else jnp.float32(1.0)
    warm = w_max * s / warmup_steps if warmup_steps else jnp.float32(w_max)
    w = jnp.where(t < 0, w_max, w_max + (w_end - w_max) * frac)
    return jnp.where(s < warmup_steps, warm, w).astype(jnp.float32)


def saf_advantages(
    adv_BxT,
    teacher_logps_BxT,
    student_logps_BxT,
    mask_BxT,
    step,
    *,
    sparsify: bool = True,
    keep_frac=0.2,
    per_row: bool = False,
    compress: bool = True,
    scale=0.0,
    schedule: bool = True,
    w_max=1.0,
    w_end=0.0,
    warmup_steps=10,
    hold_steps=0,
    anneal_steps=100,
):
    """A_t = A_GRPO,t + w(s)·C(S(A_OPD,t)) with each stage switchable.

    Args:
      adv_BxT: [B, T] RLVR (GRPO) token advantages.
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      mask_BxT: [B, T] bool or {0, 1}.
      step: training step s (scalar, may be traced; unused when schedule is off).
      sparsify: static; S on/off.
      keep_frac: ρ, fraction of OPD tokens kept by |A_OPD|.
      per_row: static; rank within each response instead of over the batch.
      compress: static; C on/off.
      scale: s of C; 0 = adaptive, `rl_advantage_scale(adv_BxT, mask_BxT)`.
      schedule: static; w(s) = `fusion_weight(step, ...)` when on, else w_max.
      w_max, w_end, warmup_steps, hold_steps, anneal_steps: see `fusion_weight`.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask.
    """
    m = _mask(mask_BxT)
    a_rl = jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)
    a_opd = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    if sparsify:
        keep = top_fraction_mask(jnp.abs(a_opd), m, keep_frac, per_row=per_row)
        a_opd = jnp.where(keep, a_opd, 0.0)
    if compress:
        s = rl_advantage_scale(a_rl, m) if not scale else jnp.float32(scale)
        a_opd = s * jnp.tanh(a_opd / s)
    if schedule:
        w = fusion_weight(
            step,
            w_max=w_max,
            w_end=w_end,
            warmup_steps=warmup_steps,
            hold_steps=hold_steps,
            anneal_steps=anneal_steps,
        )
    else:
        w = jnp.float32(w_max)
    return jnp.where(m, a_rl + w * a_opd, 0.0)
