"""RLSD's token weights: the self-teacher sets each token's magnitude, the reward its sign.

Self-Distilled RLVR (RLSD, arXiv 2604.03128) keeps the GRPO advantage A of a
rollout and weights each of its tokens by the self-teacher's evidence ratio,
oriented by the sign of A:

  Δ_t = ℓ^T_t − ℓ^S_t                          (teacher under the privileged view, student)
  w_t = 1 + λ·(clip(exp(sign(A_t)·Δ_t), 1 − ε, 1 + ε) − 1)
  A'_t = A_t·w_t

On a rollout with A > 0 the tokens the teacher supports (Δ > 0) get more credit;
with A < 0 the ratio is inverted, so the tokens the teacher finds unlikely
(Δ < 0) take more of the penalty. λ interpolates between uniform credit (0)
and the full weight (1). Reference-fixed: the sign orientation, ε = 0.2,
λ = 0.5. Ours: sign(A_t) per token (for GRPO, the rollout's sign on all its
tokens), and the clip applied to sign(A)·Δ before the exponential (the same
value as clipping exp(·), without overflow for large |Δ|).

Not yet a transform option: transform "rlsd" (`rl.methods.distill`) still applies
our magnitude rule; wiring this in adds config fields, which re-keys every
pipeline reproduction run (docs/design.md, "How to add a method").
"""

from __future__ import annotations

import jax.numpy as jnp


def rlsd_weights(teacher_logps_BxT, student_logps_BxT, adv_BxT, mask_BxT, *, eps=0.2, lam=0.5):
    """w_t = 1 + λ·(clip(exp(sign(A_t)·(ℓ^T_t − ℓ^S_t)), 1 − ε, 1 + ε) − 1) on the mask.

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      adv_BxT: [B, T] the advantages whose signs orient the ratio.
      mask_BxT: [B, T] bool or {0, 1}.
      eps: ε in (0, 1); lam: λ in [0, 1].
    Returns:
      w_BxT: float32 [B, T] in [1 − λε, 1 + λε] on the mask, 1 off it.
    """
    m = jnp.asarray(mask_BxT) != 0
    teacher, student = (jnp.asarray(x, jnp.float32) for x in (teacher_logps_BxT, student_logps_BxT))
    delta = teacher - student
    oriented = jnp.sign(jnp.asarray(adv_BxT, jnp.float32)) * delta
    ratio = jnp.exp(jnp.clip(oriented, jnp.log1p(-eps), jnp.log1p(eps)))
    return jnp.where(m, 1.0 + lam * (ratio - 1.0), 1.0)
