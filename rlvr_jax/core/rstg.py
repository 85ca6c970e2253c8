"""RSTG (Distill Where You Fail): OPD only where GRPO has no signal, only on chosen tokens.

  A'_t = A_t + λ · 1[i ∈ all-wrong group] · w_i · 1[t selected] · (ℓ^T_t − ℓ^S_t)

Fixed by the abstract: (1) sample selection, OPD only on negative zero-variance
prompts (every rollout of the group wrong, where GRPO's advantage is 0);
(2) each such sample weighted by the teacher's confidence; (3) token selection,
only tokens with high student entropy or large teacher–student divergence. The
abstract's fourth part, SFT on the teacher's correct solutions, is a loss on
teacher-generated data, not a credit transform; it is not here.

Ours: confidence w_i = exp(mean_t ℓ^T_{i,t}), the teacher's geometric-mean
probability of the student's response (in (0, 1]); divergence |ℓ^T − ℓ^S|;
"high"/"large" = the top fraction ρ = 0.2 of the candidate tokens (those of
the selected rows, ranked over the batch, ties kept); λ = 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import opd, saf_opd

TOKEN_SELECTIONS = ("entropy", "divergence", "either", "both", "none")


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def all_wrong_rows(correct_B, group_B, valid_B, num_groups: int):
    """Valid rows whose group has no valid correct row (negative zero-variance groups).

    Args:
      correct_B: [B] bool verdicts.
      group_B: [B] int32 group ids in [0, num_groups).
      valid_B: [B] bool real rows (invalid rows count in no group and are never selected).
      num_groups: static number of groups (an upper bound is fine).
    Returns:
      selected_B: bool [B].
    """
    valid_B = jnp.asarray(valid_B, bool)
    hits = (jnp.asarray(correct_B, bool) & valid_B).astype(jnp.int32)
    correct_G = jax.ops.segment_sum(hits, jnp.asarray(group_B, jnp.int32), num_groups)
    return valid_B & (correct_G[jnp.asarray(group_B, jnp.int32)] == 0)


def teacher_confidence(teacher_logps_BxT, mask_BxT):
    """w_i = exp(mean_t ℓ^T_{i,t}), the teacher's geometric-mean token probability (ours).

    Args:
      teacher_logps_BxT: [B, T] teacher log-probs of the sampled tokens.
      mask_BxT: [B, T] bool or {0, 1}.
    Returns:
      w_B: float32 [B] in (0, 1]; 1 for rows without tokens.
    """
    return jnp.exp(opd.sequence_advantage(teacher_logps_BxT, mask_BxT))


def select_tokens(entropy_BxT, divergence_BxT, mask_BxT, *, criterion="either", keep_frac=0.2):
    """Tokens with high entropy and/or large divergence: the top ρ of the masked tokens.

    Args:
      entropy_BxT: [B, T] student entropy H_t.
      divergence_BxT: [B, T] teacher–student divergence (|ℓ^T − ℓ^S|).
      mask_BxT: [B, T] bool, the candidate tokens (ranked over the whole batch).
      criterion: static, one of TOKEN_SELECTIONS ("either": high entropy or large
        divergence, the abstract's "or"; "both": and; "none": every candidate).
      keep_frac: ρ, the fraction kept by each score.
    Returns:
      bool [B, T], False off the mask.
    """
    if criterion not in TOKEN_SELECTIONS:
        raise ValueError(f"rstg token_select {criterion!r} is unknown; valid: {TOKEN_SELECTIONS}")
    m = _mask(mask_BxT)
    if criterion == "none":
        return m
    high_h = saf_opd.top_fraction_mask(entropy_BxT, m, keep_frac)
    high_d = saf_opd.top_fraction_mask(divergence_BxT, m, keep_frac)
    if criterion == "entropy":
        return high_h
    if criterion == "divergence":
        return high_d
    return (high_h | high_d) if criterion == "either" else (high_h & high_d)


def rstg_advantages(
    adv_BxT,
    teacher_logps_BxT,
    student_logps_BxT,
    entropy_BxT,
    correct_B,
    group_B,
    valid_B,
    mask_BxT,
    *,
    num_groups: int,
    token_select: str = "either",
    keep_frac=0.2,
    confidence: bool = True,
    coef=1.0,
):
    """A'_t = A_t + λ·sel_i·w_i·tok_t·(ℓ^T_t − ℓ^S_t) (see the module docstring).

    Args:
      adv_BxT: [B, T] RL token advantages (0 on all-wrong groups under GRPO).
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      entropy_BxT: [B, T] student entropy at each sampled position.
      correct_B, group_B, valid_B: [B] verdicts, group ids, real rows.
      mask_BxT: [B, T] bool or {0, 1}.
      num_groups: static number of groups (an upper bound is fine).
      token_select: static, one of TOKEN_SELECTIONS.
      keep_frac: ρ of `select_tokens`, over the tokens of the selected rows.
      confidence: static; weight each sample by `teacher_confidence` (else w_i = 1).
      coef: λ.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask; equal to the input off the
      selected rows and tokens.
    """
    m = _mask(mask_BxT)
    rows_B = all_wrong_rows(correct_B, group_B, valid_B, num_groups)
    cand = m & rows_B[:, None]
    r = opd.opd_reward(teacher_logps_BxT, student_logps_BxT, cand)
    tok = select_tokens(
        jnp.where(cand, jnp.asarray(entropy_BxT, jnp.float32), 0.0),
        jnp.abs(r),
        cand,
        criterion=token_select,
        keep_frac=keep_frac,
    )
    w_B = teacher_confidence(teacher_logps_BxT, m) if confidence else jnp.ones(m.shape[0])
    a = jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)
    return jnp.where(m, a + coef * jnp.where(tok, w_B[:, None] * r, 0.0), 0.0)
