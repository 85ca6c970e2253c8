"""H²SD (Hybrid Hindsight Self-Distillation): the self-teacher used by the verdict.

The teacher is the policy itself under a privileged context; its log-prob of
each sampled token, ℓ^H_t, arrives as one field whose context depends on the
verdict (the score stage builds it): for a successful rollout, prompt + the
response confirmed correct + a rephrasing instruction; for a failed one, prompt
+ a reference hint (key steps and the verified answer). ℓ^S_t is the student's
(behaviour) log-prob.

  * Successes: the teacher only modulates the update magnitude, never its
    direction: A'_t = A_i·m_t with m_t > 0.
  * Failures: minimise the reverse KL(π_θ ‖ π_H) from student to teacher.
    Sampled-token form (a credit term): −KL's single-sample reward
    ℓ^H_t − ℓ^S_t, A'_t = β·A_t + λ·(ℓ^H_t − ℓ^S_t); or as a loss on the current
    log-probs, `sampled_reverse_kl_loss`. Full-distribution form:
    `full_reverse_kl` over the vocabulary.

Fixed by the abstract: the split by verdict, magnitude-only modulation for
successes, reverse KL toward the hinted teacher for failures. Ours: m_t =
clip(exp(ℓ^H_t − ℓ^S_t), a, b) (the teacher-to-student probability ratio, as in
RLSD's magnitude modulation), renormalised to mean 1 over the row's tokens so
the row's credit budget Σ_t A'_t = Σ_t A_t is kept; [a, b] = [0.5, 2]; β = 1
(failed rollouts keep the verifier's negative advantage), λ = 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import opd


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def success_modulation(
    teacher_logps_BxT, student_logps_BxT, mask_BxT, *, low=0.5, high=2.0, renorm: bool = True
):
    """m_t = clip(exp(ℓ^H_t − ℓ^S_t), a, b), optionally renormalised to row mean 1.

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^H, ℓ^S of the sampled tokens.
      mask_BxT: [B, T] bool or {0, 1}.
      low, high: a, b with 0 < a ≤ b.
      renorm: static; divide by the row's masked mean (then mean_t m_t = 1).
    Returns:
      m_BxT: float32 [B, T], > 0 on the mask, 0 off it.
    """
    m = _mask(mask_BxT)
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    w = jnp.where(m, jnp.exp(jnp.clip(r, jnp.log(low), jnp.log(high))), 0.0)
    if renorm:
        # Every masked w ≥ a > 0, so the mean of a row with tokens is > 0.
        w = w / jnp.maximum(opd.sequence_advantage(w, m), low)[:, None]
    return w


def h2sd_advantages(
    adv_BxT,
    teacher_logps_BxT,
    student_logps_BxT,
    correct_B,
    mask_BxT,
    *,
    low=0.5,
    high=2.0,
    renorm: bool = True,
    fail_rl_coef=1.0,
    kl_coef=1.0,
):
    """Sampled-token H²SD credit: modulation on successes, reverse-KL reward on failures.

    Args:
      adv_BxT: [B, T] RL token advantages A_t.
      teacher_logps_BxT: [B, T] ℓ^H (rephrasing view on correct rows, hint view on wrong).
      student_logps_BxT: [B, T] ℓ^S.
      correct_B: [B] bool verdicts.
      mask_BxT: [B, T] bool or {0, 1}.
      low, high, renorm: see `success_modulation`.
      fail_rl_coef: β, weight of A_t on failed rows.
      kl_coef: λ, weight of ℓ^H − ℓ^S on failed rows.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask. On correct rows the sign of every
      token equals the sign of A_t (and, with renorm, Σ_t is kept).
    """
    m = _mask(mask_BxT)
    a = jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)
    mod = success_modulation(
        teacher_logps_BxT, student_logps_BxT, m, low=low, high=high, renorm=renorm
    )
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    ok = jnp.asarray(correct_B, bool)[:, None]
    return jnp.where(m, jnp.where(ok, a * mod, fail_rl_coef * a + kl_coef * r), 0.0)


def sampled_reverse_kl_loss(logps_BxT, old_logps_BxT, teacher_logps_BxT, mask_BxT, *, clamp=20.0):
    """Per-token loss whose gradient is the sampled-token gradient of KL(π_θ ‖ π_H).

    With y_t ~ π_old and ρ_t = π_θ/π_old: loss_t = ρ_t·sg(ℓ_θ,t − ℓ^H_t), so
    ∇loss_t = ρ_t·(ℓ_θ,t − ℓ^H_t)·∇ℓ_θ,t, the importance-weighted score-function
    gradient of the reverse KL (the "+1" term has zero expectation). Its value
    at θ = θ_old is the k1 estimate ℓ^S − ℓ^H.

    Args:
      logps_BxT: [B, T] log π_θ of the sampled tokens (differentiable).
      old_logps_BxT: [B, T] log π_old of the same tokens.
      teacher_logps_BxT: [B, T] ℓ^H.
      mask_BxT: [B, T] bool or {0, 1}.
      clamp: bound on |log ρ| (as `losses.log_ratio`).
    Returns:
      loss_BxT: float32 [B, T], 0 off the mask.
    """
    m = _mask(mask_BxT)
    lp = jnp.where(m, jnp.asarray(logps_BxT, jnp.float32), 0.0)
    old = jnp.where(m, jnp.asarray(old_logps_BxT, jnp.float32), 0.0)
    rho = jnp.exp(jnp.clip(lp - old, -clamp, clamp))
    gap = jax.lax.stop_gradient(-opd.opd_reward(teacher_logps_BxT, lp, m))
    return jnp.where(m, rho * gap, 0.0)


def full_reverse_kl(student_logits_BxTxV, teacher_logps_BxTxV, mask_BxT):
    """Full-distribution KL(π_θ ‖ π_H)_t = Σ_v π_θ(v)·(log π_θ(v) − log π_H(v)) per token.

    Differentiable in the student's logits; the teacher is stop-gradient.
    Vocabulary entries the teacher gives probability 0 (log −inf) where the
    student puts mass make the KL infinite, as they should; entries where both
    are 0 contribute 0.

    Args:
      student_logits_BxTxV: [B, T, V] student logits under θ.
      teacher_logps_BxTxV: [B, T, V] teacher log-probs (normalised over V).
      mask_BxT: [B, T] bool or {0, 1}.
    Returns:
      kl_BxT: float32 [B, T] ≥ 0, 0 off the mask.
    """
    m = _mask(mask_BxT)
    logq = jax.nn.log_softmax(jnp.asarray(student_logits_BxTxV, jnp.float32), axis=-1)
    logp = jax.lax.stop_gradient(jnp.asarray(teacher_logps_BxTxV, jnp.float32))
    q = jnp.exp(logq)
    diff = jnp.where(q > 0, logq - logp, 0.0)
    kl = jnp.sum(q * diff, axis=-1)
    return jnp.where(m, kl, 0.0)


def full_reverse_kl_loss(
    student_logits_BxTxV, teacher_logps_BxTxV, correct_B, mask_BxT, *, coef=1.0
):
    """H²SD's full-distribution failure term: λ·KL(π_θ ‖ π_H)_t on failed rows only.

    Args:
      student_logits_BxTxV, teacher_logps_BxTxV, mask_BxT: as `full_reverse_kl`.
      correct_B: [B] bool verdicts (correct rows get 0).
      coef: λ.
    Returns:
      loss_BxT: float32 [B, T], 0 off the mask and on correct rows.
    """
    kl = full_reverse_kl(student_logits_BxTxV, teacher_logps_BxTxV, mask_BxT)
    return jnp.where(jnp.asarray(correct_B, bool)[:, None], 0.0, coef * kl)
