"""GAPO (Group Adaptive Clipping Policy Optimization): per-rollout clip bounds from advantages.

GAPO keeps the PPO / GSPO surrogate and changes only the clip range: rollouts
with a larger learning signal |A_i| get more update headroom (the abstract's
reverse-KL trust-region argument). Ours (docs/methods.md), for each side
s ∈ {low, high}:

  ε_{s,i} = clip(ε_s · |A_i| / Ā, ε_min, ε_max),   Ā = mean_j |A_j|,

with Ā over the rows with a nonzero advantage (ours: rows of zero-variance
groups carry no gradient, so they should not set the scale, and the scale does
not then depend on how many saturated groups the batch holds) and ε_low,i kept
below 1 so 1 − ε_low,i stays a valid ratio bound. The loss stage sees one
micro-batch at a time, so Ā is the micro-batch's; pass `ref_scale` > 0 (a fixed
Ā, e.g. 1 for std-normalised GRPO advantages) to make the bounds independent of
how the batch is split.

The update stage calls these through the "gapo" / "gapo_gspo" policy losses
(`rlvr_jax.rl.methods.gapo`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import losses

_F32 = jnp.float32
# 1 − ε_low must stay a positive ratio bound.
_MAX_EPS_LOW = 0.999


def sequence_advantages(adv_BxT, mask_BxT):
    """A_i as the mean token advantage of each row (= A_i for broadcast advantages).

    Args:
      adv_BxT: token advantages.
      mask_BxT: bool/{0,1} loss mask.
    Returns:
      (adv_B, valid_B): float32 [B] (0 for empty rows) and bool [B] (row has a token).
    """
    m = jnp.asarray(mask_BxT) != 0
    n = m.sum(-1)
    adv_B = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0).sum(-1) / jnp.maximum(n, 1)
    return adv_B, n > 0


def adaptive_clip_bounds(
    adv_B, valid_B, *, eps_low, eps_high, eps_min, eps_max, ref_scale=0.0, eps=1e-8
):
    """Per-rollout (ε_low,i, ε_high,i) = clip(ε · |A_i| / Ā, ε_min, ε_max).

    Args:
      adv_B: sequence advantages A_i.
      valid_B: bool, rows that count in Ā.
      eps_low, eps_high: base clip ranges ε (the fixed-clip values GAPO adapts).
      eps_min, eps_max: bounds on every ε_i (ε_low,i is also kept ≤ 0.999).
      ref_scale: Ā if > 0; else the mean |A_j| over valid rows with A_j ≠ 0.
      eps: guards Ā = 0 (then every row has A = 0 and gets ε_min).
    Returns:
      (eps_low_B, eps_high_B): float32 [B].
    """
    a = jnp.abs(jnp.where(jnp.asarray(valid_B) != 0, jnp.asarray(adv_B, _F32), 0.0))
    nonzero = a > 0
    batch_scale = a.sum() / jnp.maximum(nonzero.sum(), 1)
    scale = jnp.where(ref_scale > 0, jnp.asarray(ref_scale, _F32), batch_scale)
    rel = a / jnp.maximum(scale, eps)
    low = jnp.minimum(jnp.clip(eps_low * rel, eps_min, eps_max), _MAX_EPS_LOW)
    high = jnp.clip(eps_high * rel, eps_min, eps_max)
    return low, high


def gapo_ppo_objective(
    logps_BxT,
    old_logps_BxT,
    adv_BxT,
    mask_BxT,
    *,
    eps_low=0.2,
    eps_high=0.2,
    eps_min=0.1,
    eps_max=0.5,
    ref_scale=0.0,
    clamp=20.0,
):
    """Token PPO surrogate −min(ρA, clip(ρ, 1 − ε_low,i, 1 + ε_high,i)A) with GAPO's bounds.

    Args:
      logps_BxT, old_logps_BxT, adv_BxT, mask_BxT: as in `losses.ppo_clip_objective`.
      eps_low, eps_high, eps_min, eps_max, ref_scale: as in `adaptive_clip_bounds`
        (defaults ours: the PPO ε = .2 at |A_i| = Ā, between .1 and .5).
      clamp: bound on |log ρ|.
    Returns:
      loss_BxT: float32, 0 off the mask.
      stats: [B, T] float32 "clip_low_BxT", "clip_high_BxT" indicators and the
        per-token bounds "eps_low_BxT", "eps_high_BxT" (0 off the mask).
    """
    m = jnp.asarray(mask_BxT) != 0
    adv_B, valid_B = sequence_advantages(adv_BxT, m)
    lo_B, hi_B = adaptive_clip_bounds(
        adv_B,
        valid_B,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    loss, stats = losses.ppo_clip_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        m,
        eps_low=lo_B[:, None],
        eps_high=hi_B[:, None],
        clamp=clamp,
    )
    return loss, {
        "clip_low_BxT": stats["clip_low_BxT"],
        "clip_high_BxT": stats["clip_high_BxT"],
        "eps_low_BxT": jnp.where(m, lo_B[:, None], 0.0),
        "eps_high_BxT": jnp.where(m, hi_B[:, None], 0.0),
    }


def gapo_gspo_objective(
    logps_BxT,
    old_logps_BxT,
    adv_B,
    mask_BxT,
    *,
    eps_low=3e-4,
    eps_high=4e-4,
    eps_min=1.5e-4,
    eps_max=1e-3,
    ref_scale=0.0,
    clamp=20.0,
):
    """GSPO's sequence surrogate −min(s_i A_i, clip(s_i, 1 − ε_low,i, 1 + ε_high,i) A_i).

    Args:
      logps_BxT, old_logps_BxT, mask_BxT: as in `losses.gspo_objective`.
      adv_B: sequence advantages A_i.
      eps_low, eps_high: GSPO's ranges (3e-4, 4e-4) at |A_i| = Ā.
      eps_min, eps_max: bounds (ours: half and 2.5× the GSPO high range).
      ref_scale, clamp: as in `gapo_ppo_objective`.
    Returns:
      loss_B: float32, 0 for empty rows.
      stats: [B] float32 "clip_low_B", "clip_high_B", "eps_low_B", "eps_high_B".
    """
    valid_B = (jnp.asarray(mask_BxT) != 0).any(-1)
    lo_B, hi_B = adaptive_clip_bounds(
        adv_B,
        valid_B,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    loss_B, stats = losses.gspo_objective(
        logps_BxT, old_logps_BxT, adv_B, mask_BxT, eps_low=lo_B, eps_high=hi_B, clamp=clamp
    )
    stats = dict(stats)
    stats["eps_low_B"] = jnp.where(valid_B, lo_B, 0.0)
    stats["eps_high_B"] = jnp.where(valid_B, hi_B, 0.0)
    return loss_B, stats


def clip_rate_by_success(
    clipped_B, correct_B, group_B, num_groups: int, *, num_bins=4, valid_B=None
):
    """Clip fraction of rollouts bucketed by their group's success rate (docs/methods.md's report).

    Evaluate-stage analysis: bucket b holds rows whose group success rate lies
    in [b/K, (b+1)/K) (the last bucket includes 1).

    Args:
      clipped_B: per-row clip indicator or fraction (e.g. masked mean of clip_high_BxT).
      correct_B: bool verdicts.
      group_B: int32 group ids in [0, num_groups).
      num_groups: static.
      num_bins: K, static.
      valid_B: optional bool real rows.
    Returns:
      (rate_K, count_K): float32 mean clip value per bucket (0 when empty) and row counts.
    """
    v = jnp.ones(jnp.shape(correct_B), bool) if valid_B is None else jnp.asarray(valid_B) != 0
    c = jnp.where(v, jnp.asarray(correct_B, _F32), 0.0)
    seg = lambda x: jax.ops.segment_sum(x, jnp.asarray(group_B, jnp.int32), num_groups)
    succ_G = seg(c) / jnp.maximum(seg(v.astype(_F32)), 1.0)
    succ_B = succ_G[jnp.asarray(group_B, jnp.int32)]
    bucket = jnp.clip(jnp.floor(succ_B * num_bins).astype(jnp.int32), 0, num_bins - 1)
    total = jax.ops.segment_sum(jnp.where(v, jnp.asarray(clipped_B, _F32), 0.0), bucket, num_bins)
    count = jax.ops.segment_sum(v.astype(_F32), bucket, num_bins)
    return jnp.where(count > 0, total / jnp.maximum(count, 1.0), 0.0), count
