"""Vocabulary-chunked output-layer kernels: log-probs, entropy, top-k and reverse KL.

The output projection of a Qwen model has V = 152k columns: logits of one row of
9k tokens are 5.6 GB in float32. These kernels loop over vocabulary chunks of
`chunk` columns (`lax.fori_loop`), keep running maxima and sums (the online
softmax), and never hold more than a [B, T, chunk] block of logits. Their
backward passes (`jax.custom_vjp`) recompute each chunk's logits instead of
storing them. Values equal the unchunked computation to float rounding.

Inputs are final hidden states `h_BxTxD` (after the final norm) and the output
kernel `w_DxV` (`Transformer.output_kernel()`); matmuls run in `h`'s dtype with
float32 accumulation, everything after them in float32. Position t of `h`
predicts `targets_BxT[:, t]` (shift beforehand, as `scoring.token_logps` does).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

_F32 = jnp.float32
DEFAULT_CHUNK = 8192


def _num_chunks(v: int, chunk: int) -> tuple[int, int]:
    chunk = max(1, min(int(chunk), v))
    return -(-v // chunk), chunk


def _chunk_logits(h, w_DxV, j, chunk):
    """Logits [B, T, chunk] f32 of vocabulary chunk j, and the chunk's column ids.

    The last chunk may run past V: its extra columns are -inf (their slice start
    is clamped, so those ids repeat columns of the previous chunk and are masked).
    """
    v = w_DxV.shape[1]
    start = jnp.minimum(j * chunk, v - chunk)
    w = jax.lax.dynamic_slice_in_dim(w_DxV, start, chunk, axis=1).astype(h.dtype)
    z = jnp.einsum("btd,dc->btc", h, w, preferred_element_type=_F32)
    ids = start + jnp.arange(chunk)
    fresh = ids >= j * chunk  # columns not already covered by the previous chunk
    return jnp.where(fresh, z, -jnp.inf), ids, start


def _online(carry, z):
    """Folds a logits chunk into (running max, Σ exp(z - max), Σ exp(z - max)·z)."""
    m, s, a = carry
    m_new = jnp.maximum(m, z.max(-1))
    scale = jnp.exp(m - m_new)
    e = jnp.exp(z - m_new[..., None])
    ez = jnp.where(e > 0, e * z, 0.0)  # 0·(-inf) would be NaN
    return m_new, s * scale + e.sum(-1), a * scale + ez.sum(-1)


# ------------------------------------------------------ log-probs and entropy


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _logp_entropy(h, w_DxV, targets, chunk):
    return _logp_entropy_fwd(h, w_DxV, targets, chunk)[0]


def _logp_entropy_fwd(h, w_DxV, targets, chunk):
    b, t, _ = h.shape
    n, chunk = _num_chunks(w_DxV.shape[1], chunk)
    zero = jnp.zeros((b, t), _F32)

    def body(j, carry):
        stats, zt = carry
        z, ids, start = _chunk_logits(h, w_DxV, j, chunk)
        hit = (targets >= j * chunk) & (targets < (j + 1) * chunk)
        picked = jnp.take_along_axis(z, jnp.clip(targets - start, 0, chunk - 1)[..., None], -1)
        return _online(stats, z), jnp.where(hit, picked[..., 0], zt)

    (m, s, a), zt = jax.lax.fori_loop(0, n, body, ((zero - jnp.inf, zero, zero), zero))
    lse = m + jnp.log(s)
    logp, ent = zt - lse, lse - a / s
    return (logp, ent), (h, w_DxV, targets, lse, ent)


def _logp_entropy_bwd(chunk, res, cts):
    h, w_DxV, targets, lse, ent = res
    g_logp, g_ent = cts
    n, chunk = _num_chunks(w_DxV.shape[1], chunk)
    b, t, d = h.shape

    def body(j, carry):
        dh, dw = carry
        z, ids, start = _chunk_logits(h, w_DxV, j, chunk)
        logp = z - lse[..., None]
        p = jnp.exp(logp)
        # d logp_y / dz = e_y - p;  d H / dz = -p (log p + H).
        dz = -g_logp[..., None] * p
        dz = dz + jnp.where(targets[..., None] == ids, g_logp[..., None], 0.0)
        dz = dz - g_ent[..., None] * jnp.where(p > 0, p * (logp + ent[..., None]), 0.0)
        dz = jnp.where(ids >= j * chunk, dz, 0.0).astype(h.dtype)
        w = jax.lax.dynamic_slice_in_dim(w_DxV, start, chunk, axis=1).astype(h.dtype)
        dh = dh + jnp.einsum("btc,dc->btd", dz, w, preferred_element_type=_F32)
        dw_c = jnp.einsum("btd,btc->dc", h, dz, preferred_element_type=_F32)
        old = jax.lax.dynamic_slice_in_dim(dw, start, chunk, axis=1)
        return dh, jax.lax.dynamic_update_slice_in_dim(dw, old + dw_c, start, axis=1)

    init = (jnp.zeros((b, t, d), _F32), jnp.zeros(w_DxV.shape, _F32))
    dh, dw = jax.lax.fori_loop(0, n, body, init)
    return dh.astype(h.dtype), dw.astype(w_DxV.dtype), None


_logp_entropy.defvjp(_logp_entropy_fwd, _logp_entropy_bwd)


def token_logp_entropy(h_BxTxD, w_DxV, targets_BxT, *, chunk: int = DEFAULT_CHUNK):
    """log softmax(h W)[target] and the entropy of softmax(h W), chunked over V.

    Args:
      h_BxTxD: hidden states (compute dtype).
      w_DxV: output kernel.
      targets_BxT: int token ids in [0, V).
      chunk: vocabulary columns per chunk (static); memory O(B·T·chunk).
    Returns:
      (logps_BxT, entropy_BxT), float32; differentiable in h and w.
    """
    return _logp_entropy(h_BxTxD, w_DxV, jnp.asarray(targets_BxT, jnp.int32), chunk)


# ----------------------------------------------------------------- top-k


def topk_logps(h_BxTxD, w_DxV, k: int, *, chunk: int = DEFAULT_CHUNK):
    """The k most likely tokens and their log-probs at every position (no gradient).

    Args:
      h_BxTxD, w_DxV, chunk: as in `token_logp_entropy`.
      k: how many tokens (<= chunk).
    Returns:
      (logps_BxTxK float32, descending; ids_BxTxK int32). Ties keep the lower id.
    """
    h = jax.lax.stop_gradient(h_BxTxD)
    w_DxV = jax.lax.stop_gradient(w_DxV)
    b, t, _ = h.shape
    n, chunk = _num_chunks(w_DxV.shape[1], chunk)
    if not 0 < k <= chunk:
        raise ValueError(f"top-k k={k} must be in [1, chunk={chunk}]")
    zero = jnp.zeros((b, t), _F32)

    def body(j, carry):
        stats, vals, ids = carry
        z, col, _ = _chunk_logits(h, w_DxV, j, chunk)
        cv, ci = jax.lax.top_k(z, k)
        all_v = jnp.concatenate([vals, cv], -1)
        all_i = jnp.concatenate([ids, col[ci]], -1)
        top_v, pos = jax.lax.top_k(all_v, k)  # earlier (lower-id) entries win ties
        return _online(stats, z), top_v, jnp.take_along_axis(all_i, pos, -1)

    init = (
        (zero - jnp.inf, zero, zero),
        jnp.full((b, t, k), -jnp.inf, _F32),
        jnp.zeros((b, t, k), jnp.int32),
    )
    (m, s, _), vals, ids = jax.lax.fori_loop(0, n, body, init)
    return vals - (m + jnp.log(s))[..., None], ids


# ------------------------------------------------------------ reverse KL


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _reverse_kl(h_s, w_s, h_t, w_t, chunk):
    return _reverse_kl_fwd(h_s, w_s, h_t, w_t, chunk)[0]


def _reverse_kl_fwd(h_s, w_s, h_t, w_t, chunk):
    b, t, _ = h_s.shape
    n, chunk = _num_chunks(w_s.shape[1], chunk)
    zero = jnp.zeros((b, t), _F32)

    def body(j, carry):
        (m_s, s_s, a), t_stats = carry
        z_s, _, _ = _chunk_logits(h_s, w_s, j, chunk)
        z_t, _, _ = _chunk_logits(h_t, w_t, j, chunk)
        m_new = jnp.maximum(m_s, z_s.max(-1))
        scale = jnp.exp(m_s - m_new)
        e = jnp.exp(z_s - m_new[..., None])
        diff = jnp.where(e > 0, e * (z_s - z_t), 0.0)
        s_stats = (m_new, s_s * scale + e.sum(-1), a * scale + diff.sum(-1))
        return s_stats, _online(t_stats, z_t)

    init = ((zero - jnp.inf, zero, zero), (zero - jnp.inf, zero, zero))
    (m_s, s_s, a), (m_t, s_t, _) = jax.lax.fori_loop(0, n, body, init)
    lse_s, lse_t = m_s + jnp.log(s_s), m_t + jnp.log(s_t)
    kl = a / s_s - lse_s + lse_t
    return kl, (h_s, w_s, h_t, w_t, lse_s, lse_t, kl)


def _reverse_kl_bwd(chunk, res, g_kl):
    h_s, w_s, h_t, w_t, lse_s, lse_t, kl = res
    n, chunk = _num_chunks(w_s.shape[1], chunk)
    b, t, d = h_s.shape

    def body(j, carry):
        dh, dw = carry
        z_s, ids, start = _chunk_logits(h_s, w_s, j, chunk)
        z_t, _, _ = _chunk_logits(h_t, w_t, j, chunk)
        logp_s = z_s - lse_s[..., None]
        p = jnp.exp(logp_s)
        # d KL / dz_s = p_s (log p_s - log p_t - KL); the teacher is a constant.
        log_ratio = jnp.where(p > 0, logp_s - (z_t - lse_t[..., None]), 0.0)
        dz = g_kl[..., None] * p * (log_ratio - kl[..., None])
        dz = jnp.where(ids >= j * chunk, dz, 0.0).astype(h_s.dtype)
        w = jax.lax.dynamic_slice_in_dim(w_s, start, chunk, axis=1).astype(h_s.dtype)
        dh = dh + jnp.einsum("btc,dc->btd", dz, w, preferred_element_type=_F32)
        dw_c = jnp.einsum("btd,btc->dc", h_s, dz, preferred_element_type=_F32)
        old = jax.lax.dynamic_slice_in_dim(dw, start, chunk, axis=1)
        return dh, jax.lax.dynamic_update_slice_in_dim(dw, old + dw_c, start, axis=1)

    init = (jnp.zeros((b, t, d), _F32), jnp.zeros(w_s.shape, _F32))
    dh, dw = jax.lax.fori_loop(0, n, body, init)
    zeros_t = (jnp.zeros_like(h_t), jnp.zeros_like(w_t))
    return (dh.astype(h_s.dtype), dw.astype(w_s.dtype), *zeros_t)


_reverse_kl.defvjp(_reverse_kl_fwd, _reverse_kl_bwd)


def reverse_kl(h_s_BxTxD, w_s_DxV, h_t_BxTxD, w_t_DxV, *, chunk: int = DEFAULT_CHUNK):
    """Full-vocabulary KL(π_s || π_t) per position, chunked over V (OPD's reverse KL).

    Args:
      h_s_BxTxD, w_s_DxV: the student's hidden states and output kernel.
      h_t_BxTxD, w_t_DxV: the teacher's (same V and positions; any D). The teacher
        is a constant: its gradient is zero.
      chunk: as in `token_logp_entropy`.
    Returns:
      kl_BxT float32 = Σ_v π_s(v) (log π_s(v) - log π_t(v)); differentiable in the
      student's h and w.
    """
    if w_s_DxV.shape[1] != w_t_DxV.shape[1]:
        raise ValueError(
            f"student and teacher vocabularies differ: {w_s_DxV.shape[1]} vs {w_t_DxV.shape[1]}"
        )
    return _reverse_kl(h_s_BxTxD, w_s_DxV, h_t_BxTxD, w_t_DxV, chunk)
