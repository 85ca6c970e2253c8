"""On-policy distillation (OPD) token advantages and their combinations with RLVR.

The student samples a response; a teacher scores each sampled token. With ℓ^T_t
and ℓ^S_t the teacher's and the student's log-prob of the sampled token, OPD's
token reward is the negative single-sample reverse-KL estimate

  r_t = ℓ^T_t − ℓ^S_t          (stop-gradient: both are data, not parameters)

used directly as the token advantage. This module holds that reward and the
ways the seed papers combine it with the verifier's sequence advantage A_i:

  * OPDVR (On-policy Distillation with Verifiable Reward): a ReLU gate by the
    verdict, correct rollouts keep max(0, r_t), wrong ones min(0, r_t); GRPD
    multiplies by |A_i| + u; the inverted gate is the paper's ablation.
  * Sequential-beats-Joint's joint baselines: weighted-additive A_i + w·r_t and
    teacher-modulated rescaling A_i·clip(exp(r_t), a, b); plus the plateau
    test that decides when the OPD stage hands over to RL.

`student_logps_BxT` is log π_old of the sampled tokens (the behaviour policy
that generated them, "old_logps_BxT" in the batch). Every result is float32,
exactly 0 off the mask, and finite whatever the masked positions hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

OPDVR_GATES = ("relu", "inverted", "none")


_F32 = jnp.float32


def _mask(mask_BxT) -> jax.Array:
    return jnp.asarray(mask_BxT) != 0


def _masked(x, m) -> jax.Array:
    """x as float32 with masked entries 0 (padding may hold -inf or NaN)."""
    return jnp.where(m, jnp.asarray(x, jnp.float32), 0.0)


def opd_reward(teacher_logps_BxT, student_logps_BxT, mask_BxT) -> jax.Array:
    """Sampled-token OPD reward r_t = ℓ^T_t − ℓ^S_t, stop-gradient.

    Args:
      teacher_logps_BxT: [B, T] teacher log-prob ℓ^T of each sampled token.
      student_logps_BxT: [B, T] student (behaviour) log-prob ℓ^S of the same tokens.
      mask_BxT: [B, T] bool or {0, 1}, the response tokens that train.
    Returns:
      r_BxT: float32 [B, T], 0 off the mask.
    """
    m = _mask(mask_BxT)
    r = _masked(teacher_logps_BxT, m) - _masked(student_logps_BxT, m)
    return jax.lax.stop_gradient(jnp.where(m, r, 0.0))


def sequence_advantage(adv_BxT, mask_BxT) -> jax.Array:
    """A_i recovered from token advantages: the masked mean over each row's tokens.

    For an estimator's broadcast sequence advantage this is exactly A_i (mean of
    equal values); rows without tokens get 0.

    Args:
      adv_BxT: [B, T] token advantages.
      mask_BxT: [B, T] bool or {0, 1}.
    Returns:
      adv_B: float32 [B].
    """
    m = _mask(mask_BxT)
    n_B = m.sum(-1).astype(jnp.float32)
    return _masked(adv_BxT, m).sum(-1) / jnp.maximum(n_B, 1.0)


def opdvr_advantages(
    teacher_logps_BxT,
    student_logps_BxT,
    correct_B,
    mask_BxT,
    *,
    gate: str = "relu",
    seq_adv_B=None,
    u=0.0,
):
    """OPDVR token advantages: the OPD reward gated by the rollout's verdict.

    Paper (fixed by the abstract): r_t = ℓ^T − ℓ^S; correct rollouts get
    max(0, r_t), wrong ones min(0, r_t) (a ReLU gate, no new hyperparameter),
    so correct rollouts are never pushed down and wrong ones never up. GRPD
    multiplies the gated reward by |A_i| + u, A_i the group-relative sequence
    advantage. The ablation "inverted" swaps the gates (correct: min(0, r_t),
    wrong: max(0, r_t)); "none" is plain sampled-token OPD.

    Args:
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S of the sampled tokens.
      correct_B: [B] bool verdicts.
      mask_BxT: [B, T] bool or {0, 1}.
      gate: static, one of OPDVR_GATES.
      seq_adv_B: optional [B] A_i; given, the result is scaled by |A_i| + u (GRPD).
      u: GRPD offset u ≥ 0 (ours: default 0, the plain |A_i| form; u > 0 keeps a
        distillation signal in zero-variance groups where A_i = 0).
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask. With gate "relu" it is ≥ 0 on
      correct rows and ≤ 0 on wrong rows (also under GRPD, whose factor is ≥ 0).
    """
    if gate not in OPDVR_GATES:
        raise ValueError(f"opdvr gate {gate!r} is unknown; valid: {OPDVR_GATES}")
    r = opd_reward(teacher_logps_BxT, student_logps_BxT, mask_BxT)
    c = jnp.asarray(correct_B, bool)[:, None]
    if gate == "relu":
        r = jnp.where(c, jnp.maximum(r, 0.0), jnp.minimum(r, 0.0))
    elif gate == "inverted":
        r = jnp.where(c, jnp.minimum(r, 0.0), jnp.maximum(r, 0.0))
    if seq_adv_B is not None:
        r = r * (jnp.abs(jnp.asarray(seq_adv_B, jnp.float32)) + u)[:, None]
    return r


def weighted_additive_advantages(
    adv_BxT, teacher_logps_BxT, student_logps_BxT, mask_BxT, *, weight=1.0
):
    """Joint baseline 1: A_t = A_RL,t + w·(ℓ^T_t − ℓ^S_t).

    Args:
      adv_BxT: [B, T] RL token advantages (the estimator's, broadcast).
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S.
      mask_BxT: [B, T] bool or {0, 1}.
      weight: w (ours: default 1, the unweighted sum; the paper sweeps it).
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask.
    """
    m = _mask(mask_BxT)
    r = opd_reward(teacher_logps_BxT, student_logps_BxT, m)
    return jnp.where(m, _masked(adv_BxT, m) + weight * r, 0.0)


def teacher_modulated_advantages(
    adv_BxT, teacher_logps_BxT, student_logps_BxT, mask_BxT, *, low=0.5, high=2.0
):
    """Joint baseline 2: A_t = A_RL,t · f_t, f_t = clip(exp(ℓ^T_t − ℓ^S_t), a, b).

    The teacher-to-student probability ratio rescales the RL advantage; f > 0
    (a > 0), so the verifier's sign is kept. f and its clip range are ours
    (docs/methods.md): default [a, b] = [0.5, 2].

    Args:
      adv_BxT: [B, T] RL token advantages.
      teacher_logps_BxT, student_logps_BxT: [B, T] ℓ^T, ℓ^S.
      mask_BxT: [B, T] bool or {0, 1}.
      low, high: a, b with 0 < a ≤ b.
    Returns:
      adv_BxT: float32 [B, T], 0 off the mask; same sign as the input's.
    """
    m = _mask(mask_BxT)
    # Clip in log space so a huge ratio never overflows before the clip.
    log_f = jnp.clip(
        opd_reward(teacher_logps_BxT, student_logps_BxT, m), jnp.log(low), jnp.log(high)
    )
    return jnp.where(m, _masked(adv_BxT, m) * jnp.exp(log_f), 0.0)


def opd_plateaued(scores: Sequence[float], *, delta: float = 0.0, patience: int = 3) -> bool:
    """Whether the OPD stage should hand over to RL: the validation score plateaued.

    Sequential-beats-Joint switches when the OPD validation score stops rising;
    the rule is ours (docs/methods.md): no score in the last `patience` evaluations
    beats the best before them by more than `delta`. Host-side: the pipeline
    stage calls it after each OPD evaluation.

    Args:
      scores: validation scores, oldest first.
      delta: δ, the smallest gain that counts.
      patience: k ≥ 1, the number of evaluations without such a gain.
    Returns:
      True when len(scores) > k and max(last k) − max(the rest) ≤ δ.
    """
    if patience < 1:
        raise ValueError(f"opd_plateaued: patience must be >= 1, got {patience}")
    if len(scores) <= patience:
        return False
    return max(scores[-patience:]) - max(scores[:-patience]) <= delta


# ------------------------------------------------------------- distribution-level KL
# The full-vocabulary reverse KL and the teacher's top-k are `models.vocab.reverse_kl`
# and `models.vocab.topk_logps` (chunked over the vocabulary, forward and backward).


def gather_logits(h_BxTxD, w_DxV, ids_BxTxK):
    """Logits of the K given token ids at each position, h·W[:, id] ([B, T, K] float32)."""
    cols_BxTxKxD = jnp.take(jnp.asarray(w_DxV).T, ids_BxTxK, axis=0)
    return jnp.einsum(
        "btd,btkd->btk", h_BxTxD, cols_BxTxKxD.astype(h_BxTxD.dtype), preferred_element_type=_F32
    )


def topk_reverse_kl(student_logits_BxTxK, teacher_logps_BxTxK):
    """KL(π̂_s ‖ π̂_t) over the teacher's top-k support, both renormalised on it.

    Args:
      student_logits_BxTxK: the student's logits at the teacher's top-k ids
        (`gather_logits`; differentiable).
      teacher_logps_BxTxK: the teacher's log-probs of those ids (stop-gradient).
    Returns:
      kl_BxT float32 ≥ 0: Σ_k p̂_s(k)·(log p̂_s(k) − log p̂_t(k)).
    """
    ls = jax.nn.log_softmax(jnp.asarray(student_logits_BxTxK, _F32), axis=-1)
    lt = jax.nn.log_softmax(jax.lax.stop_gradient(jnp.asarray(teacher_logps_BxTxK, _F32)), -1)
    return jnp.sum(jnp.exp(ls) * (ls - lt), axis=-1)
