"""GAR (Gradient-Aligned Reward): rollout signatures in the policy's own gradient space.

Per rollout, GAR backpropagates the token cross-entropy only through the output
projection W (V×D, the tied embedding or the lm_head): with h_t the final hidden
state (after the final norm) that predicts token y_t and p_t = softmax(W h_t),

  δ_t = p_t − e_{y_t}           (prediction error, V-dim)
  g_t = Wᵀ δ_t                  (gradient of CE_t w.r.t. h_t, D-dim)
  S   = normalise(Σ_t g_t ⊙ h_t)   ("grad_hidden", the default) or normalise(Σ_t g_t) ("grad").

Σ_t g_t ⊙ h_t is the gradient of the summed cross-entropy w.r.t. a per-dimension
gain on h (h → γ ⊙ h at γ = 1): a D-dim vector, no V×D gradient is formed. The
expert solution of the prompt (and optional auxiliary anchors) is scored the
same way; the cosine cos(S_i, S_anchor) becomes a dense bonus for passing
rollouts (`gar_rewards`), and that reward is the advantage as it is (no group
normalisation; see experiments/gar). Closed form, no backprop through the trunk;
the score stage calls these kernels (see `rlvr_jax.rl.methods.gar_signal`).

Memory: g_t needs softmax over the whole vocabulary; `output_error_grads` scans
the vocabulary in chunks of static size with an online (running-max) softmax,
so the largest temporary is [B, T, chunk], never [B, T, V].

What the abstract fixes: the output-projection gradient, cosine to an expert
anchor, the multiplicative prediction-error × activation-pattern decomposition.
The reference code (github.com/LQgdwind/GAR) fixes the defaults here: the ⊙ h_t
signature, max over anchors of a kind, β = .5, the group centring over passing
rollouts only when ≥ 2 pass (a lone passing rollout gets its absolute cosine),
and auxiliary anchors combined as real + 0.5·max(0, aux − real) ("aux_residual").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

VARIANTS = ("grad_hidden", "grad")
# How the best auxiliary-anchor cosine joins the best expert-anchor cosine (the reference's).
AUX_COMBINES = ("aux_residual", "aux_max", "real_only")

_F32 = jnp.float32
_HI = jax.lax.Precision.HIGHEST


def _vocab_chunks(w_VxD, chunk: int):
    """W in f32 as [n, chunk, D] (zero-padded) and the [n, chunk] mask of real vocabulary rows."""
    v, d = w_VxD.shape
    chunk = max(1, min(int(chunk), v))
    n = -(-v // chunk)
    w = jnp.pad(jnp.asarray(w_VxD, _F32), ((0, n * chunk - v), (0, 0)))
    valid = (jnp.arange(n * chunk) < v).reshape(n, chunk)
    return w.reshape(n, chunk, d), valid


def output_error_grads(h_BxTxD, w_VxD, targets_BxT, mask_BxT, *, chunk: int = 1024):
    """Per-token gradients g_t = Wᵀ(softmax(W h_t) − e_{y_t}) through the output projection.

    One `lax.scan` over vocabulary chunks keeps a running max m, a running sum
    s = Σ exp(W_v·h − m) and a running Σ exp(W_v·h − m) W_v, rescaled when m
    grows (the online softmax): Wᵀ p_t = acc / s at the end.

    Args:
      h_BxTxD: final hidden states; h[b, t] predicts targets[b, t] (shift beforehand).
      w_VxD: the output projection W (rows are vocabulary entries).
      targets_BxT: int token ids y_t in [0, V).
      mask_BxT: bool/{0,1}, tokens that count (the response tokens).
      chunk: static vocabulary chunk size (clamped to V); memory is O(B·T·chunk).
    Returns:
      g_BxTxD: float32, 0 at masked positions.
    """
    m = jnp.asarray(mask_BxT) != 0
    h = jnp.where(m[..., None], jnp.asarray(h_BxTxD, _F32), 0.0)
    w_NxCxD, valid_NxC = _vocab_chunks(w_VxD, chunk)
    b, t, d = h.shape

    def body(carry, xs):
        run_max, run_sum, acc = carry
        w_CxD, valid_C = xs
        logits = jnp.einsum("btd,cd->btc", h, w_CxD, precision=_HI)
        logits = jnp.where(valid_C, logits, -jnp.inf)
        new_max = jnp.maximum(run_max, logits.max(-1))
        # exp(-inf) = 0 on the first chunk; every chunk holds ≥ 1 real row, so new_max is finite.
        scale = jnp.exp(run_max - new_max)
        e = jnp.exp(logits - new_max[..., None])
        run_sum = run_sum * scale + e.sum(-1)
        acc = acc * scale[..., None] + jnp.einsum("btc,cd->btd", e, w_CxD, precision=_HI)
        return (new_max, run_sum, acc), None

    init = (
        jnp.full((b, t), -jnp.inf, _F32),
        jnp.zeros((b, t), _F32),
        jnp.zeros((b, t, d), _F32),
    )
    (_, run_sum, acc), _ = jax.lax.scan(body, init, (w_NxCxD, valid_NxC))
    w_y = jnp.take(jnp.asarray(w_VxD, _F32), jnp.asarray(targets_BxT, jnp.int32), axis=0)
    g = acc / run_sum[..., None] - w_y
    return jnp.where(m[..., None], g, 0.0)


def _normalise(x_BxD, eps=0.0):
    norm = jnp.sqrt(jnp.sum(x_BxD * x_BxD, -1, keepdims=True))
    return jnp.where(norm > eps, x_BxD / jnp.where(norm > eps, norm, 1.0), 0.0)


def gar_signatures(
    h_BxTxD, w_VxD, targets_BxT, mask_BxT, *, variant: str = "grad_hidden", chunk: int = 1024
):
    """Unit-norm rollout signatures S_i (see the module docstring).

    Args:
      h_BxTxD, w_VxD, targets_BxT, mask_BxT, chunk: as in `output_error_grads`.
      variant: static, "grad_hidden" (S ∝ Σ_t g_t ⊙ h_t) or "grad" (S ∝ Σ_t g_t).
    Returns:
      sig_BxD: float32 unit vectors; exactly 0 for rows with no masked-in token
      (or a zero sum), so their cosines are 0.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown GAR signature variant {variant!r}; valid: {VARIANTS}")
    g = output_error_grads(h_BxTxD, w_VxD, targets_BxT, mask_BxT, chunk=chunk)
    if variant == "grad_hidden":
        m = jnp.asarray(mask_BxT) != 0
        g = g * jnp.where(m[..., None], jnp.asarray(h_BxTxD, _F32), 0.0)  # padding may be NaN
    return _normalise(g.sum(1))


def cosine(a_NxD, b_NxD):
    """Cosine along the last axis; 0 where either vector is 0. float32 [N]."""
    return jnp.sum(_normalise(jnp.asarray(a_NxD, _F32)) * _normalise(jnp.asarray(b_NxD, _F32)), -1)


def _max_cos(sig_BxD, anchors_BxKxD, mask_BxK):
    """(max_k cos(S_i, S_k) over the row's anchors, whether it has one); 0 without."""
    s = _normalise(jnp.asarray(sig_BxD, _F32))
    a = _normalise(jnp.asarray(anchors_BxKxD, _F32))
    cos_BxK = jnp.einsum("bd,bkd->bk", s, a, precision=_HI)
    m = jnp.asarray(mask_BxK) != 0
    has_B = m.any(-1)
    return jnp.where(has_B, jnp.max(jnp.where(m, cos_BxK, -jnp.inf), -1), 0.0), has_B


def anchor_alignment(
    sig_BxD,
    anchors_BxKxD,
    anchor_mask_BxK,
    *,
    aux_BxJxD=None,
    aux_mask_BxJ=None,
    aux_weight=0.5,
    aux_combine: str = "aux_residual",
):
    """Alignment a_i of each rollout with its prompt's anchors (the reference's rule).

    With real_i = max_k cos(S_i, S_k) over the expert anchors and aux_i =
    max_j cos(S_i, S^aux_j) over the auxiliary ones, w = `aux_weight`:
      "aux_residual": a_i = real_i + w·max(0, aux_i − real_i)  (reference default)
      "aux_max":      a_i = max(real_i, w·aux_i)
      "real_only":    a_i = real_i (auxiliary anchors ignored).
    A row with only one kind of anchor gets that kind's cosine.

    Args:
      sig_BxD: rollout signatures.
      anchors_BxKxD: each row's expert-anchor signatures (gather a per-prompt
        [G, K, D] array with group_B first); K is static.
      anchor_mask_BxK: bool/{0,1}, which anchors exist.
      aux_BxJxD, aux_mask_BxJ: optional auxiliary anchors and their mask.
      aux_weight: w ≥ 0.
      aux_combine: static, one of AUX_COMBINES.
    Returns:
      (align_B, has_anchor_B): float32 alignment (0 without anchors) and bool,
      whether the row had any anchor.
    """
    if aux_combine not in AUX_COMBINES:
        raise ValueError(f"unknown aux_combine {aux_combine!r}; valid: {AUX_COMBINES}")
    real_B, has_r = _max_cos(sig_BxD, anchors_BxKxD, anchor_mask_BxK)
    if aux_BxJxD is None or aux_combine == "real_only":
        return real_B, has_r
    aux_B, has_a = _max_cos(sig_BxD, aux_BxJxD, aux_mask_BxJ)
    w = jnp.asarray(aux_weight, _F32)
    if aux_combine == "aux_residual":
        both = real_B + w * jnp.maximum(aux_B - real_B, 0.0)
    else:
        both = jnp.maximum(real_B, w * aux_B)
    align = jnp.where(has_r & has_a, both, jnp.where(has_r, real_B, aux_B))
    return align, has_r | has_a


def gar_rewards(
    align_B,
    passed_B,
    group_B,
    num_groups: int,
    *,
    beta=0.5,
    min_group: int = 2,
    has_anchor_B=None,
    valid_B=None,
):
    """Dense reward: 1 + β·max(0, a_i − m_g) for passing rollouts, 0 for failing ones.

    m_g is the mean of a over the group's valid, passing rows that have an
    anchor, when there are at least `min_group` of them, else 0 (reference:
    min_group = 2, so a lone passing rollout is rewarded by its absolute
    alignment instead of a bonus that is always 0; min_group = 1 centres every
    group). Segment sums, so groups may be anywhere in the batch and of any size.
    Ours: a passing rollout without an anchor gets exactly 1 (no bonus).

    Args:
      align_B: alignments a_i (e.g. from `anchor_alignment`).
      passed_B: bool, the verifier's verdict.
      group_B: int32 group ids in [0, num_groups).
      num_groups: static number of groups (rows // group size, or rows as an upper bound).
      beta: β ≥ 0 (docs/methods.md: .5).
      min_group: static, passing anchored rows a group needs for its mean to be subtracted.
      has_anchor_B: optional bool, rows with an anchor (default all).
      valid_B: optional bool, real rows (others get 0).
    Returns:
      rewards_B: float32; 0 for failing or invalid rows, ≥ 1 for passing ones
      (≤ 1 + 2β when every group is centred).
    """
    align_B = jnp.asarray(align_B, _F32)
    ones = jnp.ones(align_B.shape, bool)
    valid = ones if valid_B is None else jnp.asarray(valid_B) != 0
    anchored = ones if has_anchor_B is None else jnp.asarray(has_anchor_B) != 0
    passed = (jnp.asarray(passed_B) != 0) & valid
    counted = passed & anchored
    group_B = jnp.asarray(group_B, jnp.int32)
    n_G = jax.ops.segment_sum(counted.astype(_F32), group_B, num_groups)
    sum_G = jax.ops.segment_sum(jnp.where(counted, align_B, 0.0), group_B, num_groups)
    mean_G = jnp.where(n_G >= min_group, sum_G / jnp.maximum(n_G, 1.0), 0.0)
    bonus = jnp.where(counted, jnp.maximum(align_B - mean_G[group_B], 0.0), 0.0)
    return jnp.where(passed, 1.0 + beta * bonus, 0.0)


def _logsumexp_chunked(h_BxTxD, w_NxCxD, valid_NxC):
    def body(carry, xs):
        run_max, run_sum = carry
        w_CxD, valid_C = xs
        logits = jnp.where(
            valid_C, jnp.einsum("btd,cd->btc", h_BxTxD, w_CxD, precision=_HI), -jnp.inf
        )
        new_max = jnp.maximum(run_max, logits.max(-1))
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.exp(logits - new_max[..., None]).sum(
            -1
        )
        return (new_max, run_sum), None

    b, t, _ = h_BxTxD.shape
    init = (jnp.full((b, t), -jnp.inf, _F32), jnp.zeros((b, t), _F32))
    (run_max, run_sum), _ = jax.lax.scan(body, init, (w_NxCxD, valid_NxC))
    return run_max + jnp.log(run_sum)


def _error_gram(h1, y1, m1, h2, y2, m2, w_VxD, chunk):
    """K[b, t, s] = δ¹_t · δ²_s, chunked: p¹·p² − p¹[y²] − p²[y¹] + [y¹ = y²]."""
    w_NxCxD, valid_NxC = _vocab_chunks(w_VxD, chunk)
    lse1 = _logsumexp_chunked(h1, w_NxCxD, valid_NxC)
    lse2 = _logsumexp_chunked(h2, w_NxCxD, valid_NxC)

    def body(acc, xs):
        w_CxD, valid_C = xs
        p1 = jnp.exp(jnp.einsum("btd,cd->btc", h1, w_CxD, precision=_HI) - lse1[..., None])
        p2 = jnp.exp(jnp.einsum("bsd,cd->bsc", h2, w_CxD, precision=_HI) - lse2[..., None])
        p1, p2 = jnp.where(valid_C, p1, 0.0), jnp.where(valid_C, p2, 0.0)
        return acc + jnp.einsum("btc,bsc->bts", p1, p2, precision=_HI), None

    pp, _ = jax.lax.scan(body, jnp.zeros(h1.shape[:2] + h2.shape[1:2], _F32), (w_NxCxD, valid_NxC))
    w = jnp.asarray(w_VxD, _F32)
    # p¹_t[y²_s] = exp(h¹_t · W[y²_s] − lse¹_t), and symmetrically.
    p1_at_y2 = jnp.exp(jnp.einsum("btd,bsd->bts", h1, w[y2], precision=_HI) - lse1[..., None])
    p2_at_y1 = jnp.exp(jnp.einsum("bsd,btd->bts", h2, w[y1], precision=_HI) - lse2[:, None, :])
    same = (y1[:, :, None] == y2[:, None, :]).astype(_F32)
    k = pp - p1_at_y2 - p2_at_y1 + same
    return jnp.where(m1[:, :, None] & m2[:, None, :], k, 0.0)


def cosine_decomposition(
    h_BxTxD,
    targets_BxT,
    mask_BxT,
    anchor_h_BxSxD,
    anchor_targets_BxS,
    anchor_mask_BxS,
    w_VxD,
    *,
    chunk: int = 1024,
):
    """Splits the cosine of output-projection gradients into prediction-error × activation factors.

    Analysis (evaluate stage), not a reward. The gradient of the summed CE w.r.t.
    W is G = Σ_t δ_t h_tᵀ (V×D; both signatures compress it: Σ_t g_t ⊙ h_t =
    diag(Wᵀ G) and Σ_t g_t = Wᵀ Σ_t δ_t). Its Frobenius cosine with
    an anchor's G' is exactly

      cos(G, G') = Σ_{t,s} ω_{ts} · cos(δ_t, δ'_s) · cos(h_t, h'_s),
      ω_{ts} = ‖δ_t‖‖h_t‖‖δ'_s‖‖h'_s‖ / (‖G‖‖G'‖),

    since ⟨δ_t h_tᵀ, δ'_s h'_sᵀ⟩ = (δ_t·δ'_s)(h_t·h'_s); for single tokens it is
    the product cos(δ, δ')·cos(h, h'). Ours: reporting the per-pair factors and
    their ω-weighted means (the abstract states the theorem, not the estimator).
    Cost O(B·T·S·V) in vocabulary chunks (memory O(B·(T+S)·chunk + B·T·S)).

    Args:
      h_BxTxD, targets_BxT, mask_BxT: the rollouts (as in `output_error_grads`).
      anchor_h_BxSxD, anchor_targets_BxS, anchor_mask_BxS: one anchor per row.
      w_VxD: the output projection.
      chunk: static vocabulary chunk size.
    Returns:
      dict of float32 arrays: "cos_B" (cos(G, G')), "error_cos_BxTxS" (cos(δ_t, δ'_s)),
      "activation_cos_BxTxS" (cos(h_t, h'_s)), "weight_BxTxS" (ω), "error_factor_B"
      and "activation_factor_B" (ω-weighted means of the two factors over token
      pairs). Entries with a masked token or a zero norm are 0.
    """
    m1, m2 = jnp.asarray(mask_BxT) != 0, jnp.asarray(anchor_mask_BxS) != 0
    h1 = jnp.where(m1[..., None], jnp.asarray(h_BxTxD, _F32), 0.0)
    h2 = jnp.where(m2[..., None], jnp.asarray(anchor_h_BxSxD, _F32), 0.0)
    y1, y2 = jnp.asarray(targets_BxT, jnp.int32), jnp.asarray(anchor_targets_BxS, jnp.int32)
    k_err = _error_gram(h1, y1, m1, h2, y2, m2, w_VxD, chunk)
    k_act = jnp.einsum("btd,bsd->bts", h1, h2, precision=_HI)
    err11 = _error_gram(h1, y1, m1, h1, y1, m1, w_VxD, chunk)
    err22 = _error_gram(h2, y2, m2, h2, y2, m2, w_VxD, chunk)
    act11 = jnp.einsum("btd,bsd->bts", h1, h1, precision=_HI)
    act22 = jnp.einsum("btd,bsd->bts", h2, h2, precision=_HI)
    g_norm1 = jnp.sqrt(jnp.maximum(jnp.sum(err11 * act11, (1, 2)), 0.0))
    g_norm2 = jnp.sqrt(jnp.maximum(jnp.sum(err22 * act22, (1, 2)), 0.0))
    diag = lambda k: jnp.sqrt(jnp.maximum(jnp.diagonal(k, axis1=1, axis2=2), 0.0))
    d1, d2 = diag(err11), diag(err22)  # ‖δ_t‖, ‖δ'_s‖
    a1, a2 = diag(act11), diag(act22)  # ‖h_t‖, ‖h'_s‖
    safe_div = lambda x, y: jnp.where(y > 0, x / jnp.where(y > 0, y, 1.0), 0.0)
    err_cos = safe_div(k_err, d1[:, :, None] * d2[:, None, :])
    act_cos = safe_div(k_act, a1[:, :, None] * a2[:, None, :])
    norms = (d1 * a1)[:, :, None] * (d2 * a2)[:, None, :]
    weight = safe_div(norms, (g_norm1 * g_norm2)[:, None, None])
    cos_B = safe_div(jnp.sum(k_err * k_act, (1, 2)), g_norm1 * g_norm2)
    w_sum = jnp.sum(weight, (1, 2))
    return {
        "cos_B": cos_B,
        "error_cos_BxTxS": err_cos,
        "activation_cos_BxTxS": act_cos,
        "weight_BxTxS": weight,
        "error_factor_B": safe_div(jnp.sum(weight * err_cos, (1, 2)), w_sum),
        "activation_factor_B": safe_div(jnp.sum(weight * act_cos, (1, 2)), w_sum),
    }
