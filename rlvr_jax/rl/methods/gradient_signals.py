"""Gradient-signal methods: GAPO clip bounds and CSCR credit reallocation.

Registered here:
  policy losses "gapo" (token PPO surrogate with GAPO's per-rollout clip
    bounds) and "gapo_gspo" (GSPO's sequence surrogate with them);
  credit transform "cscr", which reads the score stage's counterfactual
    log-prob shifts "cf_shift_correct_BxT" (Δ⁺_t = ℓ⁺_t − ℓ_t under a context
    asserting the answer is correct) and "cf_shift_incorrect_BxT" (Δ⁻_t).
GAR's score signal is in `rlvr_jax.rl.methods.gar_signal`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.rl import credit, objectives

# ------------------------------------------------------------------------------ GAPO


@objectives.POLICY_LOSSES.register(
    "gapo", eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5, ref_scale=0.0
)
def gapo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
):
    """GAPO token PPO: ε_i = clip(ε·|A_i|/Ā, ε_min, ε_max) per rollout (`core.gapo`).

    Ā is the mean |A_j| over the micro-batch's rows with A_j ≠ 0, unless
    ref_scale > 0 fixes it (then the bounds do not depend on the micro-batching;
    `gapo_batch_scale` gives the whole batch's Ā). Logs clip fractions and the
    mean bounds "eps_low" / "eps_high".
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
        ref_scale=ref_scale,
    )
    return loss, {k.removesuffix("_BxT"): v for k, v in stats.items()}


@objectives.POLICY_LOSSES.register(
    "gapo_gspo", eps_low=3e-4, eps_high=4e-4, eps_min=1.5e-4, eps_max=1e-3, ref_scale=0.0
)
def gapo_gspo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
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
        ref_scale=ref_scale,
    )
    # Each sequence's loss on each of its tokens: "seq-mean-token-mean" gives GSPO's mean.
    return loss_B[:, None] * m, {k.removesuffix("_B"): v[:, None] * m for k, v in stats.items()}


def gapo_batch_scale(adv_BxT, mask_BxT) -> float:
    """Ā of a whole RL batch: the mean |A_i| over rows with a loss token and A_i ≠ 0.

    The losses above see one micro-batch at a time, so with ref_scale = 0 their
    Ā (hence every ε_i) depends on micro_batch_size and on the minibatch split.
    Computed once per batch after the credit stage and passed as the scale, the
    bounds are the same whatever the split (`adaptive_clip_bounds` with this
    value as ref_scale).

    Args:
      adv_BxT: the batch's final token advantages.
      mask_BxT: bool/{0,1} loss mask.
    Returns:
      Ā as a Python float (0.0 when every advantage is 0).
    """
    adv_B, valid_B = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    a = np.abs(np.where(np.asarray(valid_B), np.asarray(adv_B, np.float64), 0.0))
    n = int((a > 0).sum())
    return float(a.sum() / n) if n else 0.0


# ------------------------------------------------------------------------------ CSCR
CSCR_FIELDS = ("cf_shift_correct_BxT", "cf_shift_incorrect_BxT")


@credit.TRANSFORMS.register(
    "cscr", requires=CSCR_FIELDS, alpha=1.0, combine="mean", budget="tokens"
)
def cscr(adv_BxT, batch, *, alpha, combine, budget):
    """CSCR: A'_t = w_t A_t, w_t ∝ (1 + s_t)^(−α), renormalised per rollout (`core.cscr`)."""
    return cscr_lib.cscr_advantages(
        adv_BxT,
        batch[CSCR_FIELDS[0]],
        batch[CSCR_FIELDS[1]],
        batch["mask_BxT"],
        alpha=alpha,
        combine=combine,
        budget=budget,
    )
