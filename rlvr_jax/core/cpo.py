"""Token advantage shaping: CPO's guided-vs-plain disagreement and the entropy baseline.

Both add a token-level term ψ_t to the group-relative advantage A_t.

  * Entropy-based advantage shaping (Cheng et al. 2025, "Reasoning with
    Exploration: An Entropy Perspective"; the baseline CPO compares with):
    ψ_t = min(α·H_t, |A_t|/κ) with H_t the (stop-gradient) policy entropy;
    α = 0.4, κ = 2 in that paper. κ > 1 keeps the sign of A_t.
  * CPO (Contrastive Policy Optimization): the disagreement between the policy
    under a reference-guided context and the plain policy on each sampled token,
    d_t = ℓ^G_t − ℓ^S_t, shapes the advantage with a weight chosen by the
    rollout's verdict. The abstract fixes: token disagreement between guided
    and vanilla distributions, correctness-aware, signal in zero-variance
    groups, and OPD as the special case where the guided distribution is an
    external teacher. The functional form is ours:

      A'_t = β·A_t + λ_{c_i}·b(d_t),   b(d) = τ·tanh(d/τ) (τ > 0) or d (τ = 0),

    λ_{c_i} = λ_correct or λ_wrong by the verdict (the "exploration" weight of
    correct rollouts and the "exploitation" weight of failed ones). With β = 0,
    λ_correct = λ_wrong = 1, τ = 0 and ℓ^G = ℓ^T it is exactly OPD's ℓ^T − ℓ^S.
    ψ_t does not depend on A_t, so all-correct and all-wrong groups (A = 0)
    still get a signal.

All results float32, exactly 0 off the mask, finite on masked garbage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import opd


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def _masked(x, m) -> jax.Array:
    """x as float32 with masked entries 0 (padding may hold -inf or NaN)."""
    return jnp.where(m, jnp.asarray(x, jnp.float32), 0.0)


def entropy_shaped_advantages(adv_BxT, entropy_BxT, mask_BxT, *, alpha=0.4, kappa=2.0):
    """Entropy-based advantage shaping: A'_t = A_t + min(α·H_t, |A_t|/κ).

    Args:
      adv_BxT: [B, T] token advantages A_t.
      entropy_BxT: [B, T] policy entropy H_t at each sampled position (detached).
      mask_BxT: [B, T] bool or {0, 1}.
      alpha: α ≥ 0 (paper 0.4).
      kappa: κ > 1 (paper 2); |A_t|/κ caps the bonus so the sign of A_t stays.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask; 0 where A_t = 0 (the cap is 0).
    """
    m = _mask(mask_BxT)
    a = _masked(adv_BxT, m)
    h = jax.lax.stop_gradient(_masked(entropy_BxT, m))
    psi = jnp.minimum(alpha * h, jnp.abs(a) / kappa)
    return jnp.where(m, a + psi, 0.0)


def cpo_advantages(
    adv_BxT,
    guided_logps_BxT,
    plain_logps_BxT,
    correct_B,
    mask_BxT,
    *,
    beta=1.0,
    lam_correct=0.1,
    lam_wrong=0.1,
    tau=1.0,
):
    """CPO: A'_t = β·A_t + λ_{c_i}·b(ℓ^G_t − ℓ^S_t) (form ours, see the module docstring).

    Args:
      adv_BxT: [B, T] group-relative token advantages A_t.
      guided_logps_BxT: [B, T] ℓ^G, log-prob of each sampled token under the
        reference-guided context (or an external teacher: then this is OPD).
      plain_logps_BxT: [B, T] ℓ^S under the plain context (the behaviour policy).
      correct_B: [B] bool verdicts.
      mask_BxT: [B, T] bool or {0, 1}.
      beta: β, weight of the RL advantage (ours: 1; 0 gives pure distillation).
      lam_correct, lam_wrong: λ on correct / wrong rollouts (ours: 0.1 each, a
        bounded term one tenth of a unit advantage; the paper balances both).
      tau: τ ≥ 0, tanh bound on the disagreement (ours: 1; 0 = linear, unbounded).
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask.
    """
    m = _mask(mask_BxT)
    d = opd.opd_reward(guided_logps_BxT, plain_logps_BxT, m)
    if tau:
        d = tau * jnp.tanh(d / tau)
    lam_B = jnp.where(jnp.asarray(correct_B, bool), lam_correct, lam_wrong)
    return jnp.where(m, beta * _masked(adv_BxT, m) + lam_B[:, None] * d, 0.0)
