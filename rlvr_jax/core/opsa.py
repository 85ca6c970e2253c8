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

from rlvr_jax.core import cliff, opd

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


def mistake_sign_agreement(
    teacher_logps_BxT, student_logps_BxT, first_mistake_B, mask_BxT, *, tol=0.0
):
    """Per-token agreement of sign(ℓ^T − ℓ^S) with a first-mistake locator.

    On a row with a located first mistake k ≥ 0 (a response-token index, the
    `core.cliff` convention; k past the row's tokens clamps to its last one),
    an informative teacher raises the correct prefix (r_t = ℓ^T_t − ℓ^S_t > 0
    for t < k) and lowers the tokens from the mistake on (r_t < 0 for t ≥ k):
    Cliff's labels. Tokens with |r_t| ≤ tol are undecided and count in neither
    the agreeing nor the decided tokens. Rows with k = −1 are left out.

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      first_mistake_B: [B] int first mistaken response-token index, −1 if none.
      mask_BxT: [B, T] bool or {0, 1}.
      tol: |r_t| at or below which a token is undecided (≥ 0).
    Returns:
      float32 scalars (0 where the set is empty): "sign_agree" (agreeing /
      decided tokens of located rows), "sign_agree_prefix" (t < k),
      "sign_agree_suffix" (t ≥ k), "sign_agree_balanced" (their mean: 0.5 for
      any teacher whose sign is constant), "sign_agree_at_mistake" (share of
      located rows with r_k < −tol), "sign_decided_frac" (decided / all tokens
      of located rows) and "located_rows" (count).
    """
    m = _mask(mask_BxT)
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    pos_BxT, n_B = cliff.response_positions(m)
    k_B = jnp.asarray(first_mistake_B, jnp.int32)
    located_B = (k_B >= 0) & (n_B > 0)
    k_B = jnp.minimum(k_B, n_B - 1)[:, None]
    rows = m & located_B[:, None]
    decided = rows & (jnp.abs(r) > tol)
    prefix = pos_BxT < k_B
    agree = decided & jnp.where(prefix, r > 0, r < 0)

    def frac(num, den):
        return jnp.sum(num) / jnp.maximum(jnp.sum(den), 1).astype(jnp.float32)

    at_k = rows & (pos_BxT == k_B)
    agree_prefix = frac(agree & prefix, decided & prefix)
    agree_suffix = frac(agree & ~prefix, decided & ~prefix)
    return {
        "sign_agree": frac(agree, decided),
        "sign_agree_prefix": agree_prefix,
        "sign_agree_suffix": agree_suffix,
        "sign_agree_balanced": 0.5 * (agree_prefix + agree_suffix),
        "sign_agree_at_mistake": frac(at_k & (r < -tol), at_k),
        "sign_decided_frac": frac(decided, rows),
        "located_rows": jnp.sum(located_B).astype(jnp.float32),
    }
