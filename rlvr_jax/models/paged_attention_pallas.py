"""Paged attention as a Pallas TPU kernel: `paged_attention` without the gather.

Same arguments, layouts and mask rule as `models.paged_attention.paged_attention`
(read its module docstring): query t of row b attends slot s iff
`s <= q_offset_B[b] + t` and `s < kv_len_B[b]`; a query that sees no slot returns
zeros; NULL_PAGE pads the page table and is never attended.

Structure. Grid (B, K, ceil(M / C)) with C = min(block_pages, M): one program per
(row, kv head) walks that row's page table C pages per step with an online
softmax (f32 running max, sum and accumulator in VMEM scratch). The page table,
offsets and lengths are scalar-prefetch operands (SMEM); the key and value
stores are each passed C times, and the c-th copy's BlockSpec index_map reads
page id `table[b, j·C + c]`, so the Pallas pipeline DMAs exactly the pages a
step needs (double-buffered across steps) and the store is never gathered. The
page index is clamped to the row's last visible page: a block past what the row
can see maps to the block before it, so its DMA is skipped (same block index)
and the step's compute is skipped by `pl.when`; pages of a partly visible block
past the last visible one re-read that page and are masked. So no page past a
row's last visible slot is ever read, and the table needs no padding.

The G query heads of a kv head at the T positions form the R = T·G rows of one
score matrix [R, C·Z]; q is transposed to [B, K, R, H] outside the kernel (it
is small; the cache is what must not move).

Shape constraints (checked, ValueError naming the value):
  head dim H % 128 == 0  (the lane axis of q, v and out blocks, and the contraction)
  page size Z % 8 == 0   (the sublane axis of a value page)
Every block's last two dims are full array dims ([R, H], [H, Z], [Z, H]), so
the (8, 128) block rule holds for any R and Z. The flattened table (B·M int32)
lives in SMEM: split very large batches into several calls.

Interpret mode. `interpret=True` runs the kernel under JAX's TPU interpreter
(`pltpu.InterpretParams()`), which works on CPU with scalar prefetch and
simulates the TPU's memory spaces and pipeline; the tests use it. Only the
Pallas-to-Mosaic lowering is checked off-TPU (tests export for platform "tpu");
Mosaic's own compile of the kernel needs a TPU and is not run in the tests.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from rlvr_jax.models.attention import MASK_VALUE

LANES, SUBLANES = 128, 8  # TPU vreg tile (f32)


def _kernel(
    table_ref,
    q_offset_ref,
    kv_len_ref,
    q_ref,
    *refs,
    c_pages,
    n_blocks,
    z,
    g,
    t,
):
    """One (row b, kv head, block j) step: C pages into the running softmax of [R, H]."""
    k_refs, v_refs = refs[:c_pages], refs[c_pages : 2 * c_pages]
    o_ref, m_ref, l_ref, acc_ref = refs[2 * c_pages :]
    del table_ref  # used only by the index maps
    b, j = pl.program_id(0), pl.program_id(2)
    q_offset, kv_len = q_offset_ref[b], kv_len_ref[b]

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, MASK_VALUE, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(j * (c_pages * z) < jnp.minimum(kv_len, q_offset + t))
    def _step():
        q_RxH = q_ref[...]
        dtype = q_RxH.dtype
        r, h = q_RxH.shape
        last_slot_RxZ = q_offset + jax.lax.div(jax.lax.broadcasted_iota(jnp.int32, (r, z), 0), g)
        slot_RxZ = jax.lax.broadcasted_iota(jnp.int32, (r, z), 1)
        scores, masks = [], []
        for c in range(c_pages):
            s_RxZ = jnp.dot(q_RxH, k_refs[c][...].astype(dtype), preferred_element_type=jnp.float32)
            slot = slot_RxZ + (j * c_pages + c) * z
            mask = (slot <= last_slot_RxZ) & (slot < kv_len)
            scores.append(jnp.where(mask, s_RxZ * (h**-0.5), MASK_VALUE))
            masks.append(mask)
        m_prev = m_ref[...]
        m_new = functools.reduce(jnp.maximum, [s.max(-1, keepdims=True) for s in scores], m_prev)
        alpha = jnp.exp(m_prev - m_new)
        l_new, acc = alpha * l_ref[...], alpha * acc_ref[...]
        for c in range(c_pages):
            p_RxZ = jnp.where(masks[c], jnp.exp(scores[c] - m_new), 0.0)
            l_new = l_new + p_RxZ.sum(-1, keepdims=True)
            v_ZxH = v_refs[c][...].astype(dtype)
            acc = acc + jnp.dot(p_RxZ.astype(dtype), v_ZxH, preferred_element_type=jnp.float32)
        m_ref[...], l_ref[...], acc_ref[...] = m_new, l_new, acc

    @pl.when(j == n_blocks - 1)
    def _finish():
        l_Rx1 = l_ref[...]
        seen = l_Rx1 > 0
        out = jnp.where(seen, acc_ref[...] / jnp.where(seen, l_Rx1, 1.0), 0.0)
        o_ref[...] = out.astype(o_ref.dtype)


def _check_shapes(q, k_pages, v_pages, page_table, q_offset, kv_len, block_pages):
    if q.ndim != 4 or k_pages.ndim != 4 or v_pages.ndim != 4:
        raise ValueError(
            f"q, k_pages, v_pages must be 4-D, got {q.shape}, {k_pages.shape}, {v_pages.shape}"
        )
    b, _, n, h = q.shape
    p, kh, hk, z = k_pages.shape
    if hk != h:
        raise ValueError(f"k_pages head dim {hk} != q head dim {h}")
    if v_pages.shape != (p, kh, z, h):
        raise ValueError(f"v_pages shape {v_pages.shape} != {(p, kh, z, h)} (PxKxZxH)")
    if n % kh:
        raise ValueError(f"{n} query heads do not split into groups over {kh} kv heads")
    if h % LANES:
        raise ValueError(f"head dim H={h} must be a multiple of {LANES} for the TPU kernel")
    if z % SUBLANES:
        raise ValueError(f"page size Z={z} must be a multiple of {SUBLANES} for the TPU kernel")
    if page_table.ndim != 2 or page_table.shape[0] != b:
        raise ValueError(f"page_table shape {page_table.shape} must be [B={b}, M]")
    if q_offset.shape != (b,) or kv_len.shape != (b,):
        raise ValueError(f"q_offset {q_offset.shape} and kv_len {kv_len.shape} must be [B={b}]")
    if block_pages < 1:
        raise ValueError(f"block_pages={block_pages} must be positive")


def paged_attention_pallas(
    q_BxTxNxH,
    k_pages_PxKxHxZ,
    v_pages_PxKxZxH,
    page_table_BxM,
    q_offset_B,
    kv_len_B,
    *,
    block_pages=8,
    interpret=False,
):
    """Causal GQA attention of T new queries per row over that row's pages (Pallas TPU).

    Args:
      q_BxTxNxH: queries (after RoPE), in the compute dtype (f32 or bf16).
      k_pages_PxKxHxZ: key pages (f32 or bf16; cast to the compute dtype in VMEM).
      v_pages_PxKxZxH: value pages.
      page_table_BxM: int32, row b's m-th page id (NULL_PAGE past its pages).
      q_offset_B: int32, the slot of each row's query 0.
      kv_len_B: int32, the number of valid slots of each row (after this step's writes).
      block_pages: pages per grid step (static; capped at M).
      interpret: run under the Pallas TPU interpreter (CPU testing) instead of Mosaic.
    Returns:
      out_BxTxNxH in the dtype of q (zeros for queries that see no slot).
    """
    q_BxTxNxH, k_pages_PxKxHxZ, v_pages_PxKxZxH = (
        jnp.asarray(x) for x in (q_BxTxNxH, k_pages_PxKxHxZ, v_pages_PxKxZxH)
    )
    page_table_BxM = jnp.asarray(page_table_BxM, jnp.int32)
    q_offset_B, kv_len_B = jnp.asarray(q_offset_B, jnp.int32), jnp.asarray(kv_len_B, jnp.int32)
    _check_shapes(
        q_BxTxNxH,
        k_pages_PxKxHxZ,
        v_pages_PxKxZxH,
        page_table_BxM,
        q_offset_B,
        kv_len_B,
        block_pages,
    )
    b, t, n, h = q_BxTxNxH.shape
    kh, z = k_pages_PxKxHxZ.shape[1], k_pages_PxKxHxZ.shape[-1]
    g, m_pages = n // kh, page_table_BxM.shape[1]
    c_pages = min(block_pages, m_pages)
    n_blocks = -(-m_pages // c_pages)
    r = t * g
    # Row r = t·G + g of kv head k's score matrix is query head k·G + g at position t.
    q_BxKxRxH = jnp.transpose(q_BxTxNxH.reshape(b, t, kh, g, h), (0, 2, 1, 3, 4)).reshape(
        b, kh, r, h
    )
    # Slots past the table are never attended (as in paged_attention).
    kv_len_B = jnp.minimum(kv_len_B, m_pages * z)

    def page_map(c, layout):
        def index_map(bi, ki, j, table_ref, q_offset_ref, kv_len_ref):
            seen = jnp.minimum(kv_len_ref[bi], q_offset_ref[bi] + t)
            last_page = jnp.maximum(jax.lax.div(seen + z - 1, z) - 1, 0)
            m = jnp.minimum(j * c_pages + c, last_page)
            return (table_ref[bi * m_pages + m], ki, 0, 0)

        return pl.BlockSpec((None, None, *layout), index_map)

    q_spec = pl.BlockSpec((None, None, r, h), lambda bi, ki, j, *_: (bi, ki, 0, 0))
    in_specs = [q_spec]
    in_specs += [page_map(c, (h, z)) for c in range(c_pages)]
    in_specs += [page_map(c, (z, h)) for c in range(c_pages)]
    kernel = functools.partial(_kernel, c_pages=c_pages, n_blocks=n_blocks, z=z, g=g, t=t)
    out_BxKxRxH = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((b, kh, r, h), q_BxTxNxH.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            grid=(b, kh, n_blocks),
            in_specs=in_specs,
            out_specs=q_spec,
            scratch_shapes=[
                pltpu.VMEM((r, 1), jnp.float32),  # running max
                pltpu.VMEM((r, 1), jnp.float32),  # running sum
                pltpu.VMEM((r, h), jnp.float32),  # accumulator
            ],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=pltpu.InterpretParams() if interpret else False,
        name="paged_attention",
    )(
        page_table_BxM.reshape(-1),
        q_offset_B,
        kv_len_B,
        q_BxKxRxH,
        *([k_pages_PxKxHxZ] * c_pages),
        *([v_pages_PxKxZxH] * c_pages),
    )
    out = out_BxKxRxH.reshape(b, kh, t, g, h)
    return jnp.transpose(out, (0, 2, 1, 3, 4)).reshape(b, t, n, h)
