"""PAIR kernels: continuation design and pair-inclusion-weighted leave-one-out advantages.

The unclipped leave-one-out (RLOO) group gradient of a group of G candidates is
a U-statistic over pairs:

    Σ_i A_i ∇log π(o_i),  A_i = r_i - mean_{j≠i} r_j
                         = 1/(G-1) Σ_{j≠i} (r_i - r_j),
    so  Σ_i A_i ∇_i = 1/(G-1) Σ_{i<j} (r_i - r_j)(∇_i - ∇_j).

If candidate i is completed with probability π_i independently of the others
(Poisson sampling given the prefixes; π = 1 for candidates already finished
inside their prefix), the pair (i, j) is observed with probability π_i π_j.
Weighting each observed pair by 1/(π_i π_j) makes the estimator
design-unbiased for the complete-pair target; per rollout this is the advantage

    Â_i = I_i / (G-1) Σ_{j≠i} I_j (r_i - r_j) / (π_i π_j)

which the update stage uses in place of A_i (unclipped, unstandardised, as the
paper's unbiasedness statement assumes).

Design (ours; the paper fixes "a convex design under an expected suffix-token
budget"): minimise the AM-GM majorant of the pair variance proxy,
Σ_{i<j} q_ij/(π_i π_j) <= ½ Σ_i u_i/π_i², u_i = Σ_{j≠i} q_ij,
q_ij = P(r_i ≠ r_j) from the prefix predictor, subject to Σ_i π_i c_i <= T and
π_min <= π_i <= 1 (c_i: predicted remaining tokens). It is separable and
convex; its KKT solution is π_i(λ) = clip((2 u_i / (λ c_i))^{1/3}, π_min, 1),
and `design_inclusion` finds λ by bisection (water-filling), exact to float
precision.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _same_group(group_R):
    same = group_R[:, None] == group_R[None, :]
    return same & ~jnp.eye(group_R.shape[0], dtype=bool)


@jax.jit
def contrast_mass(p_R, group_R):
    """u_i = Σ_{j≠i, same group} P(r_i ≠ r_j) for binary rewards with P(r=1) = p.

    Args:
      p_R: predicted success of each candidate (use the true 0/1 for finished ones).
      group_R: int group id of each candidate.
    Returns:
      [R] u_R.
    """
    q = p_R[:, None] * (1 - p_R[None, :]) + p_R[None, :] * (1 - p_R[:, None])
    return jnp.sum(jnp.where(_same_group(group_R), q, 0.0), 1)


@jax.jit
def design_inclusion(u_R, cost_R, active_R, token_budget, pi_min):
    """Continuation probabilities: argmin Σ u_i/π_i² s.t. Σ π_i c_i <= T, π_min <= π <= 1.

    Args:
      u_R: contrast mass of each candidate (>= 0).
      cost_R: predicted remaining tokens (> 0) of each candidate.
      active_R: bool, still undecided (inactive rows get π = 1 at no cost).
      token_budget: T, expected suffix tokens over the active rows.
      pi_min: lower bound on π (> 0 keeps every pair observable: unbiasedness).
    Returns:
      [R] π_R. If even π = π_min overspends T, π_min everywhere (the budget is
      infeasible); if π = 1 fits, all ones.
    """
    c = jnp.where(active_R, jnp.maximum(cost_R, 1e-6), 0.0)
    log_ratio = jnp.log(jnp.maximum(2.0 * u_R, 1e-30)) - jnp.log(jnp.maximum(c, 1e-30))

    def pis(log_lam):
        pi = jnp.clip(jnp.exp((log_ratio - log_lam) / 3.0), pi_min, 1.0)
        return jnp.where(active_R, pi, 1.0)

    def spent(log_lam):
        return jnp.sum(pis(log_lam) * c)

    act = jnp.any(active_R)
    lo = jnp.min(jnp.where(active_R, log_ratio, jnp.inf)) - 1.0  # every π = 1
    hi = jnp.max(jnp.where(active_R, log_ratio - 3 * jnp.log(pi_min), -jnp.inf)) + 1.0
    lo, hi = jnp.where(act, lo, 0.0), jnp.where(act, hi, 1.0)

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        over = spent(mid) > token_budget
        return jnp.where(over, mid, lo), jnp.where(over, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 100, body, (lo, hi))
    return pis(hi)


@jax.jit
def pair_weights(group_R, included_R, incl_prob_R):
    """[R, R] weight of each observed pair: 1/(π_i π_j) for included i ≠ j in one group, else 0."""
    both = included_R[:, None] & included_R[None, :] & _same_group(group_R)
    return jnp.where(both, 1.0 / (incl_prob_R[:, None] * incl_prob_R[None, :]), 0.0)


@jax.jit
def pair_advantages(reward_R, group_R, included_R, incl_prob_R, candidates_R):
    """Pair-inclusion-weighted leave-one-out advantages (module docstring).

    Args:
      reward_R: rewards (any value where not included).
      group_R: int group ids.
      included_R: bool, the rollout is complete (observed).
      incl_prob_R: its inclusion probability π_i (1 = always observed).
      candidates_R: G of the row's group (candidates, observed or not).
    Returns:
      [R] Â_R (0 where not included). With every π = 1 this is RLOO's advantage.
    """
    w = pair_weights(group_R, included_R, incl_prob_R)
    diff = reward_R[:, None] - reward_R[None, :]
    return jnp.sum(w * diff, 1) / jnp.maximum(candidates_R - 1, 1)


@jax.jit
def pair_gradient(reward_R, grad_RxD, group_R, included_R, incl_prob_R, candidates_R):
    """Σ_i Â_i g_i: the estimator (or, with all included and π = 1, the complete-pair target)."""
    adv = pair_advantages(reward_R, group_R, included_R, incl_prob_R, candidates_R)
    return adv @ grad_RxD
