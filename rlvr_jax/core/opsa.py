"""OPSA (On-Policy Self-Adaptation) and the teacher-noise ablations of its paper.

The paper finds that OPD's gains come mostly from pushing down low-probability
sampled tokens, and that one fixed negative advantage matches the teacher's.
OPSA needs no teacher: every sampled token gets a negative advantage scaled by
its normalised entropy,

  A_t = −c · H_t / mean(H),

so high-entropy positions (tail tokens among many candidates) are pushed down
hardest. Fixed by the abstract: supervision-free, negative, entropy-adaptive.
Ours: c = 1; mean(H) over the batch's response tokens (or each row's, with
per_row); a batch with mean H = 0 gives 0 (no signal where the policy is
deterministic); the result replaces the RL advantage unless rl_coef > 0
(OPSA is an OPD replacement, run without a reward).

Ablations (the paper's): plain OPD (`opd.opd_reward`), the fixed negative
advantage (entropy_scaled=False: A_t = −c), and OPD with noisy teacher tokens
removed. What counts as a noisy teacher token is ours, `teacher_noise_mask`:
"verdict", the teacher's sign contradicts the verifier (r_t > 0 on a wrong
rollout or r_t < 0 on a correct one), or "low_prob", the teacher gives the
sampled token probability below p_min.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import opd

NOISE_CRITERIA = ("verdict", "low_prob")


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def opsa_advantages(
    adv_BxT,
    entropy_BxT,
    mask_BxT,
    *,
    c=1.0,
    entropy_scaled: bool = True,
    per_row: bool = False,
    rl_coef=0.0,
):
    """A'_t = rl_coef·A_t − c·H_t / mean(H)  (or −c with entropy_scaled=False).

    Args:
      adv_BxT: [B, T] RL token advantages (ignored when rl_coef = 0).
      entropy_BxT: [B, T] policy entropy H_t ≥ 0 at each sampled position.
      mask_BxT: [B, T] bool or {0, 1}.
      c: magnitude of the negative advantage.
      entropy_scaled: static; False gives the fixed negative advantage −c.
      per_row: static; normalise by each row's mean entropy, not the batch's.
      rl_coef: weight of the incoming advantage (ours: 0, pure OPSA).
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask; with rl_coef = 0 every token is ≤ 0
      and the masked mean of the entropy term is −c over the normalisation set.
    """
    m = _mask(mask_BxT)
    if entropy_scaled:
        h = jnp.where(m, jnp.asarray(entropy_BxT, jnp.float32), 0.0)
        if per_row:
            mean = opd.sequence_advantage(h, m)[:, None]
        else:
            mean = h.sum() / jnp.maximum(m.sum(), 1).astype(jnp.float32)
        scale = jnp.where(mean > 0, h / jnp.where(mean > 0, mean, 1.0), 0.0)
    else:
        scale = jnp.ones(m.shape, jnp.float32)
    a = jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)
    return jnp.where(m, rl_coef * a - c * scale, 0.0)


def teacher_noise_mask(
    teacher_logps_BxT, student_logps_BxT, correct_B, mask_BxT, *, criterion="verdict", p_min=1e-3
):
    """Tokens whose teacher supervision counts as noise (definition ours, see module docstring).

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      correct_B: [B] bool verdicts (used by "verdict").
      mask_BxT: [B, T] bool or {0, 1}.
      criterion: static, one of NOISE_CRITERIA.
      p_min: probability floor of "low_prob".
    Returns:
      noisy_BxT: bool [B, T], False off the mask.
    """
    if criterion not in NOISE_CRITERIA:
        raise ValueError(f"opsa noise criterion {criterion!r} is unknown; valid: {NOISE_CRITERIA}")
    m = _mask(mask_BxT)
    if criterion == "low_prob":
        lt = jnp.where(m, jnp.asarray(teacher_logps_BxT, jnp.float32), 0.0)
        return m & (lt < jnp.log(p_min))
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    ok = jnp.asarray(correct_B, bool)[:, None]
    return m & jnp.where(ok, r < 0, r > 0)


def denoised_opd_advantages(
    teacher_logps_BxT, student_logps_BxT, correct_B, mask_BxT, *, criterion="verdict", p_min=1e-3
):
    """OPD advantage r_t = ℓ^T − ℓ^S with the noisy teacher tokens set to 0.

    Args: as `teacher_noise_mask`.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask and on noisy tokens.
    """
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, mask_BxT)
    noisy = teacher_noise_mask(
        teacher_logps_BxT, student_logps_BxT, correct_B, mask_BxT, criterion=criterion, p_min=p_min
    )
    return jnp.where(noisy, 0.0, r)


def teacher_noise_stats(teacher_logps_BxT, student_logps_BxT, correct_B, mask_BxT, **kw):
    """The paper's teacher-noise statistics: noisy fraction overall, on correct and on wrong rows.

    Args:
      teacher_logps_BxT, student_logps_BxT, correct_B, mask_BxT: as `teacher_noise_mask`.
      **kw: criterion, p_min of `teacher_noise_mask`.
    Returns:
      {"noise_frac", "noise_frac_correct", "noise_frac_wrong"}: float32 scalars,
      fractions of masked tokens (0 when the set is empty).
    """
    m = _mask(mask_BxT)
    noisy = teacher_noise_mask(teacher_logps_BxT, student_logps_BxT, correct_B, m, **kw)
    ok = jnp.asarray(correct_B, bool)[:, None]

    def frac(sel):
        return jnp.sum(noisy & sel) / jnp.maximum(jnp.sum(sel), 1).astype(jnp.float32)

    return {
        "noise_frac": frac(m),
        "noise_frac_correct": frac(m & ok),
        "noise_frac_wrong": frac(m & ~ok),
    }
