"""GAPO: per-rollout clip bounds from the advantage's size (the policy losses and their signal).

Registered here: the policy losses "gapo" (token PPO surrogate with GAPO's
per-rollout clip bounds, Ā over the whole minibatch) and "gapo_gspo" (GSPO's
sequence surrogate with them), and the score signal "group_success" they read
for their clip-rate-by-success diagnostics. Kernels: `core.gapo`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.rl import objectives, signals

GROUP_SUCCESS = "group_success_B"
# Group success-rate buckets of the clip-rate diagnostics: (lo, hi] (groups with
# success 0 or 1 have zero advantage and no bucket).
SUCCESS_BUCKETS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))


@signals.register("group_success", provides=(GROUP_SUCCESS,))
def group_success(ctx, groups, batch):
    """group_success_B: the share of correct valid rows in each row's group (0 for invalid rows)."""
    del ctx, groups
    g, v = np.asarray(batch["group_B"]), np.asarray(batch["valid_B"], bool)
    ok = np.asarray(batch["correct_B"], bool) & v
    n = np.bincount(g[v], minlength=g.max(initial=0) + 1)
    k = np.bincount(g[ok], minlength=len(n))
    return {GROUP_SUCCESS: np.where(v, k[g] / np.maximum(n[g], 1), 0.0).astype(np.float32)}


def gapo_batch_scale(adv_BxT, mask_BxT):
    """Ā of a minibatch: the mean |A_i| over rows with a loss token and A_i ≠ 0 (0 if none).

    The update computes it over every row of the minibatch before the
    micro-batches run (its entry's `minibatch_stats`), so GAPO's bounds do not
    depend on `train.micro_batch_size`. Traceable.

    Args:
      adv_BxT: final token advantages; mask_BxT: bool/{0,1} loss mask.
    Returns:
      float32 scalar Ā.
    """
    adv_B, valid_B = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    a = jnp.abs(jnp.where(valid_B, adv_B, 0.0))
    return a.sum() / jnp.maximum((a > 0).sum(), 1)


def _minibatch_scale(mb, **hp):
    del hp
    return {"scale": gapo_batch_scale(mb["adv_BxT"], mb["mask_BxT"])}


def _scale(ref_scale, minibatch):
    """Ā: ref_scale when > 0, else the whole minibatch's."""
    return jnp.where(ref_scale > 0, ref_scale, minibatch["scale"])


def _success_buckets(stats, adv_BxT, mask_BxT, success_B):
    """Clip rates by group success rate: of positive-advantage tokens clipped high and of
    negative ones clipped low, per bucket (the subset "pos_pass25-50" of
    `objectives.SUBSETS`, logged as "clip_high_frac@pos_pass25-50"), as GAPO reports them."""
    m = jnp.asarray(mask_BxT) != 0
    adv_B, _ = gapo_lib.sequence_advantages(adv_BxT, m)
    out = {}
    for lo, hi in SUCCESS_BUCKETS:
        in_B = (success_B > lo) & (success_B <= hi) & (success_B < 1)
        name = f"pass{round(100 * lo)}-{round(100 * hi)}"
        for sign, side, sel_B in (("pos", "high", adv_B > 0), ("neg", "low", adv_B < 0)):
            rows = (in_B & sel_B)[:, None].astype(jnp.float32)
            out[f"{sign}_{name}"] = {
                "tokens": jnp.broadcast_to(rows, m.shape),
                f"clip_{side}_frac": stats[f"clip_{side}"] * rows,
            }
    return {objectives.SUBSETS: out}


_GAPO = dict(requires=(GROUP_SUCCESS,), minibatch_stats=_minibatch_scale)


@objectives.POLICY_LOSSES.register(
    "gapo", **_GAPO, eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5, ref_scale=0.0
)
def gapo(
    logps_BxT,
    old_logps_BxT,
    adv_BxT,
    mask_BxT,
    *,
    mb,
    minibatch,
    eps_low,
    eps_high,
    eps_min,
    eps_max,
    ref_scale,
):
    """GAPO token PPO: ε_i = clip(ε·|A_i|/Ā, ε_min, ε_max) per rollout (`core.gapo`).

    Ā is the mean |A_j| over the whole minibatch's rows with A_j ≠ 0 (computed
    before the micro-batches: the bounds do not depend on the split), unless
    ref_scale > 0 fixes it. Logs clip fractions, the mean bounds "eps_low" /
    "eps_high" and the clip rates by group success rate (`_success_buckets`).
    """
    loss, stats = gapo_lib.gapo_ppo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=_scale(ref_scale, minibatch),
    )
    stats = {k.removesuffix("_BxT"): v for k, v in stats.items()}
    return loss, stats | _success_buckets(stats, adv_BxT, mask_BxT, mb[GROUP_SUCCESS])


@objectives.POLICY_LOSSES.register(
    "gapo_gspo", **_GAPO, eps_low=3e-4, eps_high=4e-4, eps_min=1.5e-4, eps_max=1e-3, ref_scale=0.0
)
def gapo_gspo(
    logps_BxT,
    old_logps_BxT,
    adv_BxT,
    mask_BxT,
    *,
    mb,
    minibatch,
    eps_low,
    eps_high,
    eps_min,
    eps_max,
    ref_scale,
):
    """GAPO on GSPO's sequence ratio (use aggregation "seq-mean-token-mean", as for "gspo")."""
    m = (jnp.asarray(mask_BxT) != 0).astype(jnp.float32)
    adv_B, _ = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    loss_B, stats = gapo_lib.gapo_gspo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_B,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=_scale(ref_scale, minibatch),
    )
    # Each sequence's loss on each of its tokens: "seq-mean-token-mean" gives GSPO's mean.
    stats = {k.removesuffix("_B"): v[:, None] * m for k, v in stats.items()}
    return loss_B[:, None] * m, stats | _success_buckets(stats, adv_BxT, m, mb[GROUP_SUCCESS])
