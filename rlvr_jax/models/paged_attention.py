"""Paged KV cache kernels: attention through a page table, K/V writes, page copies.

A paged cache keeps every sequence's keys and values in fixed-size pages of Z
slots drawn from one store per layer; row b's slot s lives in page
`page_table_BxM[b, s // Z]` at offset `s % Z`. Pages are handed out on the host
by `rlvr_jax.sampling.pages.PagePool`; these kernels only read and write them.

Layouts follow models/attention.py (keys slots-last, values slots before the
head dim), with the page as the leading axis:
  k_pages_PxKxHxZ   keys of P pages, K kv heads, head dim H, Z slots per page
  v_pages_PxKxZxH   values
Gathering a row's pages and merging the page and slot axes gives exactly the
dense cache's `k_BxKxHxS` / `v_BxKxSxH` (S = M·Z), so both attention products
stay plain batched matmuls with the contraction on the fast axis.

Page NULL_PAGE (id 0) is reserved: the pool never hands it out, page tables are
padded with it, and writes that have no page of their own (idle rows, padding
tokens, slots past a row's table) land there. Its contents are garbage but
finite, and no unmasked query ever reads it. Stores must hold finite values
everywhere (start from zeros): a masked slot still enters the matmuls with
weight 0.

`PagedKV` bundles one layer's store with one call's page table, offsets and
new-token counts: `models.layers.Attention` takes it in place of the dense
cache and calls `write_and_attend` (see models/paged_forward.py).

Mask rule (models/attention.py's, with per-row offsets): query t of row b
attends slot s iff `s <= q_offset_B[b] + t` and `s < kv_len_B[b]`. A query that
sees no slot returns zeros. Forward only: used for prefill and decode, never
differentiated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rlvr_jax.models.attention import MASK_VALUE
from rlvr_jax.models.paged_attention_pallas import paged_attention_pallas

# Reserved page id: never allocated; pads page tables and absorbs writes with no page.
NULL_PAGE = 0


def paged_attention(
    q_BxTxNxH,
    k_pages_PxKxHxZ,
    v_pages_PxKxZxH,
    page_table_BxM,
    q_offset_B,
    kv_len_B,
    *,
    block_pages=8,
):
    """Causal GQA attention of T new queries per row over that row's pages.

    An online softmax over blocks of `block_pages` pages (flash attention over
    the page table): each step gathers one block of every row's pages into a
    contiguous [B, K, H, block_pages·Z] view. Blocks past the last slot any row
    can see are never gathered (a `lax.fori_loop` with a data-dependent trip
    count), so a decode step reads only the filled part of the cache.

    Args:
      q_BxTxNxH: queries (after RoPE), in the compute dtype (f32 or bf16).
      k_pages_PxKxHxZ: key pages (any float dtype; cast to the compute dtype).
      v_pages_PxKxZxH: value pages.
      page_table_BxM: int32, row b's m-th page id (NULL_PAGE past its pages).
      q_offset_B: int32, the slot of each row's query 0.
      kv_len_B: int32, the number of valid slots of each row (after this step's writes).
      block_pages: pages per softmax block (static; the table is padded to a multiple).
    Returns:
      out_BxTxNxH in the dtype of q (zeros for queries that see no slot).
    """
    q_BxTxNxH, k_pages_PxKxHxZ, v_pages_PxKxZxH = (
        jnp.asarray(x) for x in (q_BxTxNxH, k_pages_PxKxHxZ, v_pages_PxKxZxH)
    )
    b, t, n, h = q_BxTxNxH.shape
    kh, z = k_pages_PxKxHxZ.shape[1], k_pages_PxKxHxZ.shape[-1]
    if n % kh:
        raise ValueError(f"{n} query heads do not split into groups over {kh} kv heads")
    g = n // kh
    m_pages = page_table_BxM.shape[1]
    nb = -(-m_pages // block_pages)
    pad = ((0, 0), (0, nb * block_pages - m_pages))
    table = jnp.pad(jnp.asarray(page_table_BxM, jnp.int32), pad, constant_values=NULL_PAGE)
    dtype = q_BxTxNxH.dtype
    # Rows of each kv head's score matrix: its G query heads at every new position.
    q_BxKxRxH = jnp.transpose(q_BxTxNxH.reshape(b, t, kh, g, h), (0, 2, 1, 3, 4)).reshape(
        b, kh, t * g, h
    )
    q_offset_B = jnp.asarray(q_offset_B, jnp.int32)
    kv_len_B = jnp.asarray(kv_len_B, jnp.int32)
    last_slot_BxR = q_offset_B[:, None] + jnp.arange(t * g) // g  # causal bound per score row
    # Slots any row can see: [0, max_b min(kv_len, q_offset + T)).
    seen = jnp.max(jnp.minimum(kv_len_B, q_offset_B + t))
    bz = block_pages * z
    trips = jnp.clip(-(-seen // bz), 0, nb)

    def step(j, carry):
        m_i, l_i, acc = carry
        pages_BxC = jax.lax.dynamic_slice_in_dim(table, j * block_pages, block_pages, axis=1)
        # [B, C, K, H, Z] -> [B, K, H, C·Z]; [B, C, K, Z, H] -> [B, K, C·Z, H]
        k_j = jnp.transpose(k_pages_PxKxHxZ[pages_BxC], (0, 2, 3, 1, 4)).reshape(b, kh, h, bz)
        v_j = jnp.transpose(v_pages_PxKxZxH[pages_BxC], (0, 2, 1, 3, 4)).reshape(b, kh, bz, h)
        s = jnp.matmul(q_BxKxRxH, k_j.astype(dtype), preferred_element_type=jnp.float32)
        slot = j * bz + jnp.arange(bz)
        mask = (slot[None, None, :] <= last_slot_BxR[:, :, None]) & (
            slot[None, None, :] < kv_len_B[:, None, None]
        )
        mask = mask[:, None]  # [B, 1, R, C·Z]: the same for every kv head
        s = jnp.where(mask, s * (h**-0.5), MASK_VALUE)
        m_new = jnp.maximum(m_i, s.max(-1))
        p = jnp.where(mask, jnp.exp(s - m_new[..., None]), 0.0)
        alpha = jnp.exp(m_i - m_new)
        pv = jnp.matmul(p.astype(dtype), v_j.astype(dtype), preferred_element_type=jnp.float32)
        return m_new, alpha * l_i + p.sum(-1), alpha[..., None] * acc + pv

    init = (
        jnp.full((b, kh, t * g), MASK_VALUE, jnp.float32),
        jnp.zeros((b, kh, t * g), jnp.float32),
        jnp.zeros((b, kh, t * g, h), jnp.float32),
    )
    _, l_i, acc = jax.lax.fori_loop(0, trips, step, init)
    out = jnp.where((l_i > 0)[..., None], acc / jnp.where(l_i > 0, l_i, 1.0)[..., None], 0.0)
    out = out.astype(dtype).reshape(b, kh, t, g, h)
    return jnp.transpose(out, (0, 2, 1, 3, 4)).reshape(b, t, n, h)


def write_kv(
    k_pages_PxKxHxZ,
    v_pages_PxKxZxH,
    page_table_BxM,
    slot_B,
    k_BxKxHxT,
    v_BxKxTxH,
    n_valid_B=None,
):
    """Scatters T new tokens per row into their pages (a functional update).

    Token t of row b goes to slot `slot_B[b] + t`: page `page_table_BxM[b, slot // Z]`,
    offset `slot % Z`. Slots past the end of the table go to NULL_PAGE, as do
    slots whose table entry is NULL_PAGE (idle rows, padding past a row's
    pages) and, with `n_valid_B`, every token t >= n_valid_B[b] (the padding of
    a row with fewer new tokens than T, which must not touch the slots after
    its own: they may lie in a page another row shares). The caller (the pool)
    guarantees that no two rows write one slot of a real page: the pages a row
    writes are its own (refcount 1).

    Args:
      k_pages_PxKxHxZ, v_pages_PxKxZxH: the layer's page store.
      page_table_BxM: int32 page ids per row.
      slot_B: int32, the slot of each row's first new token.
      k_BxKxHxT: new keys (slots last, as in the dense cache); cast to the store dtype.
      v_BxKxTxH: new values.
      n_valid_B: optional int32, how many of the T tokens of each row are real
        (default: all T).
    Returns:
      (new k_pages_PxKxHxZ, new v_pages_PxKxZxH).
    """
    k_pages_PxKxHxZ, v_pages_PxKxZxH = jnp.asarray(k_pages_PxKxHxZ), jnp.asarray(v_pages_PxKxZxH)
    page_table_BxM = jnp.asarray(page_table_BxM, jnp.int32)
    m_pages, z = page_table_BxM.shape[1], k_pages_PxKxHxZ.shape[-1]
    t = k_BxKxHxT.shape[-1]
    slot_BxT = jnp.asarray(slot_B, jnp.int32)[:, None] + jnp.arange(t)
    index_BxT = slot_BxT // z
    page_BxT = jnp.take_along_axis(page_table_BxM, jnp.clip(index_BxT, 0, m_pages - 1), axis=1)
    keep_BxT = index_BxT < m_pages
    if n_valid_B is not None:
        keep_BxT &= jnp.arange(t)[None, :] < jnp.asarray(n_valid_B, jnp.int32)[:, None]
    page_BxT = jnp.where(keep_BxT, page_BxT, NULL_PAGE)
    off_BxT = slot_BxT % z
    # Advanced indices split by slices put their [B, T] dims first: the values are [B, T, K, H].
    k_new = k_pages_PxKxHxZ.at[page_BxT, :, :, off_BxT].set(
        jnp.transpose(k_BxKxHxT, (0, 3, 1, 2)).astype(k_pages_PxKxHxZ.dtype)
    )
    v_new = v_pages_PxKxZxH.at[page_BxT, :, off_BxT, :].set(
        jnp.transpose(v_BxKxTxH, (0, 2, 1, 3)).astype(v_pages_PxKxZxH.dtype)
    )
    return k_new, v_new


def copy_pages(k_pages_PxKxHxZ, v_pages_PxKxZxH, src_C, dst_C):
    """Copies whole pages src_C[i] -> dst_C[i] (the device half of copy-on-write).

    Pad a fixed-size copy list with (NULL_PAGE, NULL_PAGE) pairs: copying the
    null page onto itself changes nothing that is ever read.

    Args:
      k_pages_PxKxHxZ, v_pages_PxKxZxH: the layer's page store.
      src_C, dst_C: int32 page ids; every dst is distinct from every src.
    Returns:
      (new k_pages_PxKxHxZ, new v_pages_PxKxZxH).
    """
    k_pages_PxKxHxZ, v_pages_PxKxZxH = jnp.asarray(k_pages_PxKxHxZ), jnp.asarray(v_pages_PxKxZxH)
    src_C, dst_C = jnp.asarray(src_C, jnp.int32), jnp.asarray(dst_C, jnp.int32)
    return (
        k_pages_PxKxHxZ.at[dst_C].set(k_pages_PxKxHxZ[src_C]),
        v_pages_PxKxZxH.at[dst_C].set(v_pages_PxKxZxH[src_C]),
    )


# PagedKV.kernel -> attention over pages (same signature and semantics).
_ATTEND = {"jax": paged_attention, "pallas": paged_attention_pallas}


@struct.dataclass
class PagedKV:
    """One layer's page store and one call's addressing: a paged cache as Attention sees it.

    `models.layers.Attention` takes it in place of the dense (k, v) pair: the
    cache kind (a Python type, so static under jit) picks the kernel, and the
    layer's projections, norms and RoPE are the same code for both. Built per
    layer by `models.paged_forward.paged_forward`.

    Attributes:
      k_pages_PxKxHxZ, v_pages_PxKxZxH: the layer's store.
      page_table_BxM: int32 page ids per row (NULL_PAGE padded).
      q_offset_B: int32, the slot (= position) of each row's first new token.
      n_new_B: int32, real new tokens per row (the rest of the T are padding
        and write to NULL_PAGE); kv_len = q_offset + n_new.
      block_pages: pages per softmax block of `paged_attention` (static).
      kernel: "jax" (`paged_attention`) or "pallas" (`paged_attention_pallas`,
        TPU only; static).
    """

    k_pages_PxKxHxZ: jax.Array
    v_pages_PxKxZxH: jax.Array
    page_table_BxM: jax.Array
    q_offset_B: jax.Array
    n_new_B: jax.Array
    block_pages: int = struct.field(pytree_node=False, default=8)
    kernel: str = struct.field(pytree_node=False, default="jax")

    def write_and_attend(self, q_BxTxNxH, k_BxKxHxT, v_BxKxTxH):
        """Writes the T new keys/values, then attends the T queries over the row's pages.

        Args:
          q_BxTxNxH: queries after RoPE.
          k_BxKxHxT, v_BxKxTxH: the new keys (after RoPE) and values.
        Returns:
          (out_BxTxNxH, PagedKV holding the updated store).
        """
        if self.kernel not in _ATTEND:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose from {sorted(_ATTEND)}")
        k_pages, v_pages = write_kv(
            self.k_pages_PxKxHxZ,
            self.v_pages_PxKxZxH,
            self.page_table_BxM,
            self.q_offset_B,
            k_BxKxHxT,
            v_BxKxTxH,
            n_valid_B=self.n_new_B,
        )
        out = _ATTEND[self.kernel](
            q_BxTxNxH,
            k_pages,
            v_pages,
            self.page_table_BxM,
            self.q_offset_B,
            self.q_offset_B + self.n_new_B,
            block_pages=self.block_pages,
        )
        return out, self.replace(k_pages_PxKxHxZ=k_pages, v_pages_PxKxZxH=v_pages)
