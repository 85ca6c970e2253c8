"""Causal grouped-query attention kernels: dense ("xla"), blockwise ("blockwise"), TPU ("pallas").

Every kernel computes the same function. Query t (cache slot `q_offset + t`)
attends key slot s iff `s <= q_offset + t` and `kv_valid_BxS[b, s]`; that one
rule covers training (q_offset = 0, keys are the queries, left or right padding
in `kv_valid`), prefill into a KV cache (q_offset = 0, S = the cache length:
slots past the prompt fail the causal test) and decoding (q_offset =
`cache.index`). A query with no visible key (a padding position) returns zeros
in the blockwise kernels and an average of every value in the dense one; no
real position ever reads it.

Layouts (models/layers.py keeps its KV cache in them): queries
`q_BxTxNxH`, keys `k_BxKxHxS` (slots last), values `v_BxKxSxH`. Heads are
grouped: query head n reads kv head n // G, G = N // K.

  xla        materialises the [B, K, T·G, S] f32 scores, O(T·S) memory; on
             CPU slower than blockwise even at T = 256 (measured: much of its
             time goes to first touches of its big per-call buffers).
  blockwise  online softmax over key blocks inside query blocks (flash
             attention in plain XLA) with its own backward (`jax.custom_vjp`),
             O(T·block) memory; key blocks past the last visible slot are never
             touched (`lax.fori_loop` with a data-dependent trip count), so
             causal training skips half the work and a decode step reads only
             the filled part of its cache. On one CPU the batch runs in
             cache-sized row chunks (`lax.map`), so no score buffer outgrows
             the cache: the fastest kernel on CPU (block 64: 1.2x PyTorch's
             SDPA fwd+bwd at T = 256 and 1024 on the 3m bench shapes).
  pallas     the TPU splash-attention kernel (`jax.experimental.pallas`) for
             training and scoring passes (no cache); everywhere else (CPU, GPU,
             a KV cache) it falls back to `blockwise`. Pallas is imported only
             when the kernel is traced on a TPU.
  auto       chosen per call by the number of key slots S (static), `resolve`:
             dense `xla` for S < AUTO_MIN_KEYS, else `blockwise` with block
             AUTO_BLOCK (`pallas` on a TPU). Measured on CPU (3m bench shapes, 16
             rows, forward + backward, docs/benchmarks.md "auto attention"): dense
             is faster at S = 64 (5.6 vs 7.5 ms), even at 128 (24 vs 26), and
             blockwise (block 64) at 192 (38 vs 69), 256 (57 vs 120) and 1024 (739
             vs 3317). The threshold is 256, not 192: every miniature run the
             reproduction pages recorded has S ≤ 192 (≤ 128-token contexts + 64
             new tokens), so under "auto" they keep the dense kernel they were
             measured with, sample for sample. Not measured on GPU or TPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rlvr_jax import sharding
from rlvr_jax.models.config import ATTENTION_IMPLS as IMPLS

# Finite "minus infinity": a fully masked row stays NaN-free.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
# Bytes of one batch chunk's f32 score block in the blockwise kernel on CPU: about
# a core's L2 cache (measured best among 1, 2, 4, 8 rows on the 3m bench shapes).
CHUNK_BYTES = 256 * 1024
# "auto": the blockwise kernel from this many key slots on, with this block (module
# docstring: the measured crossover and why the threshold sits above it).
AUTO_MIN_KEYS = 256
AUTO_BLOCK = 64


def resolve(impl: str, block: int, num_keys: int, backend: str | None = None) -> tuple[str, int]:
    """(kernel, block) that `impl` runs for `num_keys` key slots: itself unless "auto"."""
    if impl not in IMPLS:
        raise ValueError(f"attention impl {impl!r}; choose one of {IMPLS}")
    if impl != "auto":
        return impl, block
    if num_keys < AUTO_MIN_KEYS:
        return "xla", block
    return ("pallas" if (backend or jax.default_backend()) == "tpu" else "blockwise"), AUTO_BLOCK


def attention(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, kv_valid_BxS, q_offset=0, *, impl="xla", block=512):
    """Causal masked GQA attention; see the module docstring for the mask rule.

    Args:
      q_BxTxNxH: queries (after RoPE), in the compute dtype.
      k_BxKxHxS: keys, slots on the last axis.
      v_BxKxSxH: values.
      kv_valid_BxS: bool, True at slots holding a real token.
      q_offset: int or int32 scalar, the slot of query 0.
      impl: one of IMPLS ("auto": `resolve` by the key slots S).
      block: query and key block length of the blockwise kernel.
    Returns:
      out_BxTxNxH in the dtype of q.
    """
    impl, block = resolve(impl, block, k_BxKxHxS.shape[-1])
    if impl == "pallas" and isinstance(q_offset, int) and q_offset == 0:
        if jax.default_backend() == "tpu" and k_BxKxHxS.shape[-1] == q_BxTxNxH.shape[1]:
            return _splash(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, kv_valid_BxS)
    b, t, n, h = q_BxTxNxH.shape
    k = k_BxKxHxS.shape[1]
    g = n // k
    # Rows of each kv head's score matrix: its G query heads at every new position.
    q_BxKxMxH = jnp.transpose(q_BxTxNxH.reshape(b, t, k, g, h), (0, 2, 1, 3, 4)).reshape(
        b, k, t * g, h
    )
    q_offset = jnp.asarray(q_offset, jnp.int32)
    if impl == "xla":
        out = _dense(q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, kv_valid_BxS, q_offset, g)
    else:
        out = blockwise_attention(
            q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, kv_valid_BxS, q_offset, groups=g, block=block
        )
    return jnp.transpose(out.reshape(b, k, t, g, h), (0, 2, 1, 3, 4)).reshape(b, t, n, h)


def _visible(q_slot_M, k_slot_S, valid_BxS):
    """[B, 1, M, S] bool: the module's mask rule for query slots M and key slots S."""
    causal_MxS = k_slot_S[None, :] <= q_slot_M[:, None]
    return causal_MxS[None, None] & valid_BxS[:, None, None, :]


def _dense(q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, q_offset, g):
    m, h, s = q_BxKxMxH.shape[2], q_BxKxMxH.shape[3], k_BxKxHxS.shape[-1]
    dtype = q_BxKxMxH.dtype
    scores = jnp.matmul(q_BxKxMxH, k_BxKxHxS.astype(dtype), preferred_element_type=jnp.float32)
    mask = _visible(q_offset + jnp.arange(m) // g, jnp.arange(s), valid_BxS)
    scores = jnp.where(mask, scores * (h**-0.5), MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    return jnp.matmul(probs, v_BxKxSxH.astype(dtype))


# ------------------------------------------------------------------ blockwise


def _blocks(length: int, block: int) -> tuple[int, int]:
    """(block size, padded length): one block when the length fits, else padded to blocks."""
    if length <= block:
        return length, length
    return block, -(-length // block) * block


def _rows_per_chunk(b: int, score_block_bytes: int) -> int:
    """Batch rows per pass: the largest divisor of b whose score blocks fit CHUNK_BYTES."""
    most = max(1, CHUNK_BYTES // max(1, score_block_bytes))
    return max(c for c in range(1, b + 1) if b % c == 0 and c <= most)


def blockwise_attention(
    q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, q_offset, *, groups, block, rows=None
):
    """Online-softmax attention over blocks of queries and keys, O(T·block) memory.

    On CPU the batch is split into chunks of `rows` rows run one after another
    (`lax.map`), so one chunk's [rows, K, block·G, block] f32 score blocks stay in
    cache (about CHUNK_BYTES) and the buffers XLA allocates per call stay small:
    on the 3m bench shapes at T = 256, block 256 drops from 250 to 95 CPU ms and
    block 64 gains 5-10 % (docs/benchmarks.md, "Attention on CPU"). Other
    backends, and a batch sharded under `sharding.activate`, run the whole batch
    at once.

    Args:
      q_BxKxMxH: queries grouped per kv head: row m is position m // groups.
      k_BxKxHxS, v_BxKxSxH, valid_BxS: keys, values and their validity.
      q_offset: int32 scalar, the slot of position 0.
      groups: G, query heads per kv head.
      block: query/key block length (positions).
      rows: batch rows per chunk (a divisor of B); None: the CPU cache rule above.
    Returns:
      out_BxKxMxH in the dtype of q (zeros for rows with no visible key).
    """
    b, kh, m, h = q_BxKxMxH.shape
    if rows is None:
        block_bytes = kh * min(block, m // groups) * groups * min(block, k_BxKxHxS.shape[-1]) * 4
        # A sharded batch is left whole: chunks would slice across devices.
        on_one_cpu = jax.default_backend() == "cpu" and sharding.active() is None
        rows = _rows_per_chunk(b, block_bytes) if on_one_cpu else b
    if b % rows:
        raise ValueError(f"rows={rows} must divide the batch {b}")
    if rows < b:
        chunked = lambda x: x.reshape(b // rows, rows, *x.shape[1:])  # noqa: E731
        run = functools.partial(_blockwise, q_offset=q_offset, groups=groups, block=block)
        args = (q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, valid_BxS)
        out = jax.lax.map(lambda a: run(*a), tuple(chunked(x) for x in args))
        return out.reshape(b, kh, m, h)
    return _blockwise(
        q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, q_offset, groups=groups, block=block
    )


def _blockwise(q_BxKxMxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, q_offset, *, groups, block):
    b, kh, m, h = q_BxKxMxH.shape
    t, s = m // groups, k_BxKxHxS.shape[-1]
    bq, tp = _blocks(t, block)
    bk, sp = _blocks(s, block)
    if tp != t:  # pad queries with extra positions past the end (sliced off below)
        q_BxKxMxH = jnp.pad(q_BxKxMxH, ((0, 0), (0, 0), (0, (tp - t) * groups), (0, 0)))
    if sp != s:  # pad keys with invalid slots
        k_BxKxHxS = jnp.pad(k_BxKxHxS, ((0, 0), (0, 0), (0, 0), (0, sp - s)))
        v_BxKxSxH = jnp.pad(v_BxKxSxH, ((0, 0), (0, 0), (0, sp - s), (0, 0)))
        valid_BxS = jnp.pad(valid_BxS, ((0, 0), (0, sp - s)))
    dims = (groups, bq, bk)
    out = _flash(q_BxKxMxH, k_BxKxHxS.astype(q_BxKxMxH.dtype), v_BxKxSxH.astype(q_BxKxMxH.dtype),
                 valid_BxS, q_offset, dims)  # fmt: skip
    return out[:, :, :m]


def _key_range(i, q_offset, dims, num_key_blocks):
    """Key blocks [0, hi) that query block i can see (the causal bound)."""
    _, bq, bk = dims
    last_slot = q_offset + (i + 1) * bq - 1
    return jnp.clip(last_slot // bk + 1, 0, num_key_blocks)


def _query_start(j, q_offset, dims):
    """First query block that sees any slot of key block j."""
    _, bq, bk = dims
    return jnp.maximum((j * bk - q_offset) // bq, 0)


def _block_scores(q_i, k_j, valid_j, i, j, q_offset, dims):
    """Scaled scores [B, K, bq·G, bk] f32 of query block i and key block j, and their mask."""
    g, bq, bk = dims
    s = jnp.matmul(q_i, k_j, preferred_element_type=jnp.float32) * (q_i.shape[-1] ** -0.5)
    q_slot = q_offset + i * bq + jnp.arange(bq * g) // g
    mask = _visible(q_slot, j * bk + jnp.arange(bk), valid_j)
    return s, mask


def _slice(x, start, size, axis):
    return jax.lax.dynamic_slice_in_dim(x, start * size, size, axis=axis)


def _flash_fwd_impl(q, k, v, valid, q_offset, dims):
    """(out [B, K, M, H], lse [B, K, M] f32; +inf where a row sees no key)."""
    g, bq, bk = dims
    b, kh, m, h = q.shape
    nq, nk = m // (bq * g), k.shape[-1] // bk

    def query_block(_, i):
        q_i = _slice(q, i, bq * g, 2)

        def key_block(j, carry):
            m_i, l_i, acc = carry
            s, mask = _block_scores(q_i, _slice(k, j, bk, 3), _slice(valid, j, bk, 1), i, j,
                                    q_offset, dims)  # fmt: skip
            s = jnp.where(mask, s, MASK_VALUE)
            m_new = jnp.maximum(m_i, s.max(-1))
            p = jnp.where(mask, jnp.exp(s - m_new[..., None]), 0.0)
            alpha = jnp.exp(m_i - m_new)
            pv = jnp.matmul(p.astype(v.dtype), _slice(v, j, bk, 2),
                            preferred_element_type=jnp.float32)  # fmt: skip
            return m_new, alpha * l_i + p.sum(-1), alpha[..., None] * acc + pv

        init = (
            jnp.full((b, kh, bq * g), MASK_VALUE, jnp.float32),
            jnp.zeros((b, kh, bq * g), jnp.float32),
            jnp.zeros((b, kh, bq * g, h), jnp.float32),
        )
        m_i, l_i, acc = jax.lax.fori_loop(0, _key_range(i, q_offset, dims, nk), key_block, init)
        seen = l_i > 0
        out = acc / jnp.where(seen, l_i, 1.0)[..., None]
        lse = jnp.where(seen, m_i + jnp.log(jnp.where(seen, l_i, 1.0)), jnp.inf)
        return None, (out.astype(q.dtype), lse)

    _, (out, lse) = jax.lax.scan(query_block, None, jnp.arange(nq))
    # [nq, B, K, bq·G, ...] -> [B, K, M, ...]
    out = jnp.moveaxis(out, 0, 2).reshape(b, kh, m, h)
    return out, jnp.moveaxis(lse, 0, 2).reshape(b, kh, m)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _flash(q, k, v, valid, q_offset, dims):
    return _flash_fwd_impl(q, k, v, valid, q_offset, dims)[0]


def _flash_fwd(q, k, v, valid, q_offset, dims):
    out, lse = _flash_fwd_impl(q, k, v, valid, q_offset, dims)
    return out, (q, k, v, valid, q_offset, out, lse)


def _flash_bwd(dims, res, d_out):
    """FlashAttention-2's backward: per key block, loop over the query blocks that see it.

    It works on transposed score blocks [bk, bq·G] and a transposed dq, so every
    matmul contracts its left operand's last dim: XLA:CPU runs those on its fast
    path, the transposed-left products of the textbook form on a slow generic one.
    """
    q, k, v, valid, q_offset, out, lse = res
    g, bq, bk = dims
    b, kh, m, h = q.shape
    mq = bq * g
    nq, nk = m // mq, k.shape[-1] // bk
    scale = h**-0.5
    d_out = d_out.astype(q.dtype)
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, K, M]
    k_sh = jnp.swapaxes(k, 2, 3)  # [B, K, S, H]
    f32 = dict(preferred_element_type=jnp.float32)

    def key_block(dq_t, j):
        kt_j, k_j = _slice(k, j, bk, 3), _slice(k_sh, j, bk, 2)  # [B,K,H,bk], [B,K,bk,H]
        v_j, valid_j = _slice(v, j, bk, 2), _slice(valid, j, bk, 1)

        def query_block(i, carry):
            dq_t, dk_j, dv_j = carry
            q_i, do_i = _slice(q, i, mq, 2), _slice(d_out, i, mq, 2)  # [B, K, mq, H]
            s_t = jnp.einsum("bknh,bkmh->bknm", k_j, q_i, **f32) * scale  # [B, K, bk, mq]
            q_slot = q_offset + i * bq + jnp.arange(mq) // g
            mask_t = jnp.swapaxes(_visible(q_slot, j * bk + jnp.arange(bk), valid_j), 2, 3)
            lse_i, delta_i = _slice(lse, i, mq, 2), _slice(delta, i, mq, 2)
            p_t = jnp.where(mask_t, jnp.exp(s_t - lse_i[:, :, None, :]), 0.0)
            dv_j = dv_j + jnp.einsum("bknm,bkmh->bknh", p_t.astype(q.dtype), do_i, **f32)
            dp_t = jnp.einsum("bknh,bkmh->bknm", v_j, do_i, **f32)
            ds_t = (p_t * (dp_t - delta_i[:, :, None, :]) * scale).astype(q.dtype)
            dk_j = dk_j + jnp.einsum("bknm,bkmh->bknh", ds_t, q_i, **f32)
            dq_t_i = jnp.einsum("bkhn,bknm->bkhm", kt_j, ds_t, **f32)  # [B, K, H, mq]
            dq_t = jax.lax.dynamic_update_slice_in_dim(
                dq_t, _slice(dq_t, i, mq, 3) + dq_t_i, i * mq, axis=3
            )
            return dq_t, dk_j, dv_j

        zeros = jnp.zeros((b, kh, bk, h), jnp.float32)
        start = _query_start(j, q_offset, dims)
        dq_t, dk_j, dv_j = jax.lax.fori_loop(start, nq, query_block, (dq_t, zeros, zeros))
        return dq_t, (dk_j, dv_j)

    dq_t, (dk, dv) = jax.lax.scan(key_block, jnp.zeros((b, kh, h, m), jnp.float32), jnp.arange(nk))
    dq = jnp.swapaxes(dq_t, 2, 3)
    # [nk, B, K, bk, H] -> [B, K, S, H]; keys back to [B, K, H, S].
    dk = jnp.swapaxes(jnp.moveaxis(dk, 0, 2).reshape(b, kh, -1, h), 2, 3)
    dv = jnp.moveaxis(dv, 0, 2).reshape(v.shape)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# --------------------------------------------------------------------- pallas


def _splash(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, *, interpret: bool = False):
    """TPU splash attention (causal, padding as segment ids); no cache, T == S."""
    from rlvr_jax.models import splash  # lazy: Pallas TPU is imported only on this path

    return splash.attention(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, interpret=interpret)
