"""CSCR (Counterfactual Sensitivity Credit Reallocation): down-weight tokens that privileged
contexts move a lot, keeping each rollout's credit budget and every sign.

The score stage rescores each sampled rollout under two privileged contexts,
one asserting the answer is correct and one asserting it is incorrect, giving
per-token log-prob shifts Δ⁺_t = ℓ⁺_t − ℓ_t and Δ⁻_t = ℓ⁻_t − ℓ_t. The paper
finds both shifts mostly point the same way, and large ones sit on
substitutable surface tokens: their magnitude is counterfactual sensitivity,
not learning value. CSCR (credit stage, after GRPO) then:

  s_t  = ½(|Δ⁺_t| + |Δ⁻_t|)            (ours; "max" optional)
  w̃_t  = (1 + s_t)^(−α)                (ours: α = 0 is GRPO; bounded in (0, 1])
  w_t  = w̃_t · n_i / Σ_t w̃_t           (Σ_t w_t = n_i, the row's token count)
  A'_t = w_t · A_t

so for broadcast advantages Σ_t A'_t = n_i A_i (the credit budget) and
sign(A'_t) = sign(A_t). Budget "abs_adv" (ours) instead rescales so that
Σ_t |A'_t| = Σ_t |A_t|, which is the same for broadcast advantages and also
holds after token-level transforms that vary A_t within a row.

What the abstract fixes: two opposing contexts, sensitivity from the shifts,
down-weighting, renormalisation preserving budget and direction, a strength.
"""

from __future__ import annotations

import jax.numpy as jnp

SENSITIVITIES = ("mean", "max")
BUDGETS = ("tokens", "abs_adv")

_F32 = jnp.float32


def sensitivity(shift_pos_BxT, shift_neg_BxT, mask_BxT, *, combine: str = "mean"):
    """s_t from the two counterfactual shifts: mean (default) or max of |Δ⁺_t|, |Δ⁻_t|.

    Args:
      shift_pos_BxT: Δ⁺_t, log-prob shift under the "correct" context.
      shift_neg_BxT: Δ⁻_t, under the "incorrect" context.
      mask_BxT: bool/{0,1}; masked entries may hold anything (padding).
      combine: static, one of SENSITIVITIES.
    Returns:
      s_BxT float32 ≥ 0, 0 off the mask.
    """
    if combine not in SENSITIVITIES:
        raise ValueError(f"unknown CSCR sensitivity combine {combine!r}; valid: {SENSITIVITIES}")
    m = jnp.asarray(mask_BxT) != 0
    a = jnp.abs(jnp.where(m, jnp.asarray(shift_pos_BxT, _F32), 0.0))
    b = jnp.abs(jnp.where(m, jnp.asarray(shift_neg_BxT, _F32), 0.0))
    return 0.5 * (a + b) if combine == "mean" else jnp.maximum(a, b)


def cscr_weights(sens_BxT, mask_BxT, *, alpha=1.0, budget_weights_BxT=None):
    """Token weights w_t = w̃_t · Σ_t u_t / Σ_t u_t w̃_t with w̃_t = (1 + s_t)^(−α).

    Args:
      sens_BxT: sensitivities s_t ≥ 0.
      mask_BxT: bool/{0,1}.
      alpha: α ≥ 0, the strength (0: all weights 1).
      budget_weights_BxT: u_t ≥ 0, what the budget counts (default 1 per token,
        so Σ_t w_t = n_i; |A_t| for the "abs_adv" budget).
    Returns:
      w_BxT float32 > 0 on the mask, 0 off it; rows whose Σ u_t w̃_t is 0 get 1s.
    """
    m = jnp.asarray(mask_BxT) != 0
    s = jnp.where(m, jnp.asarray(sens_BxT, _F32), 0.0)
    raw = jnp.where(m, jnp.exp(-alpha * jnp.log1p(s)), 0.0)
    u = m.astype(_F32) if budget_weights_BxT is None else jnp.where(m, budget_weights_BxT, 0.0)
    num = u.sum(-1, keepdims=True)
    den = (u * raw).sum(-1, keepdims=True)
    w = raw * num / jnp.where(den > 0, den, 1.0)
    return jnp.where(m, jnp.where(den > 0, w, 1.0), 0.0)


def cscr_advantages(
    adv_BxT,
    shift_pos_BxT,
    shift_neg_BxT,
    mask_BxT,
    *,
    alpha=1.0,
    combine: str = "mean",
    budget: str = "tokens",
):
    """A'_t = w_t · A_t with sensitivity-based weights (see the module docstring).

    Args:
      adv_BxT: token advantages (e.g. GRPO's broadcast A_i).
      shift_pos_BxT, shift_neg_BxT: counterfactual log-prob shifts Δ⁺_t, Δ⁻_t.
      mask_BxT: bool/{0,1} loss mask.
      alpha: strength α ≥ 0 (ours: 1).
      combine: static, how s_t combines the two shifts (SENSITIVITIES).
      budget: static, "tokens" (Σ_t w_t = n_i, docs/methods.md) or "abs_adv"
        (Σ_t |A'_t| = Σ_t |A_t|).
    Returns:
      adv_BxT float32: same sign as A_t everywhere, 0 off the mask; a row whose
      advantages are all 0 stays 0.
    """
    if budget not in BUDGETS:
        raise ValueError(f"unknown CSCR budget {budget!r}; valid: {BUDGETS}")
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    sens = sensitivity(shift_pos_BxT, shift_neg_BxT, m, combine=combine)
    u = jnp.abs(adv) if budget == "abs_adv" else None
    return adv * cscr_weights(sens, m, alpha=alpha, budget_weights_BxT=u)


def shift_agreement(shift_pos_BxT, shift_neg_BxT, mask_BxT, *, tol=0.0):
    """The paper's diagnostic: how often the two counterfactual shifts agree in sign.

    Evaluate-stage analysis over tokens where both |shifts| > tol.

    Args:
      shift_pos_BxT, shift_neg_BxT, mask_BxT: as in `sensitivity`.
      tol: ignore shifts of magnitude ≤ tol.
    Returns:
      dict of float32 scalars: "same_sign_frac", "reversal_frac" (of the counted
      tokens; 0 if none) and "counted" (number of tokens).
    """
    m = jnp.asarray(mask_BxT) != 0
    a = jnp.where(m, jnp.asarray(shift_pos_BxT, _F32), 0.0)
    b = jnp.where(m, jnp.asarray(shift_neg_BxT, _F32), 0.0)
    counted = m & (jnp.abs(a) > tol) & (jnp.abs(b) > tol)
    n = counted.sum().astype(_F32)
    same = (counted & (jnp.sign(a) == jnp.sign(b))).sum()
    frac = same / jnp.maximum(n, 1.0)
    return {
        "same_sign_frac": jnp.where(n > 0, frac, 0.0),
        "reversal_frac": jnp.where(n > 0, 1.0 - frac, 0.0),
        "counted": n,
    }
