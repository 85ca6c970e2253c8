"""TPU splash attention for training and scoring passes (imported only when it is used).

`jax.experimental.pallas.ops.tpu.splash_attention` computes causal attention
with a sparse block mask and its own fused backward. Padding becomes segment
ids (real tokens 1, padding 0: a padded query sees only padded keys, a real
query only real ones), which is the mask rule of `models.attention` at every
real query. Grouped-query heads run as multi-query attention per kv head.

Under an active mesh (`sharding.activate`) the kernel runs per shard inside
`jax.shard_map`: rows split like the batch, heads over `tensor` when both the
query and the kv heads divide it (else whole per device).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

from rlvr_jax import sharding


def _block(length: int, target: int = 512) -> int:
    """The largest power-of-two block <= target that divides the length (>= 1)."""
    b = target
    while b > 1 and length % b:
        b //= 2
    return b


@functools.lru_cache(maxsize=32)
def _kernel(groups: int, t: int, s: int, interpret: bool):
    mask = sm.MultiHeadMask([sm.CausalMask((t, s)) for _ in range(groups)])
    bq, bk = _block(t), _block(s)
    sizes = sk.BlockSizes(
        block_q=bq, block_kv=bk, block_kv_compute=bk,
        block_q_dkv=bq, block_kv_dkv=bk, block_kv_dkv_compute=bk,
        block_q_dq=bq, block_kv_dq=bk,
    )  # fmt: skip
    return sk.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def _local(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, *, interpret):
    b, t, n, h = q_BxTxNxH.shape
    kh, s = k_BxKxHxS.shape[1], k_BxKxHxS.shape[-1]
    g = n // kh
    kernel = _kernel(g, t, s, interpret)
    dtype = q_BxTxNxH.dtype
    # The kernel applies no scale; queries are pre-scaled by 1/sqrt(H).
    q = (q_BxTxNxH * jnp.asarray(h**-0.5, dtype)).reshape(b, t, kh, g, h)
    q_BxKxGxTxH = jnp.transpose(q, (0, 2, 3, 1, 4))
    k_BxKxSxH = jnp.swapaxes(k_BxKxHxS, 2, 3).astype(dtype)
    seg = valid_BxS.astype(jnp.int32)
    ids = sk.SegmentIds(q=seg, kv=seg)

    def one_row(q_KxGxTxH, k_KxSxH, v_KxSxH, ids_row):
        per_head = jax.vmap(lambda qh, kh_, vh: kernel(qh, kh_, vh, segment_ids=ids_row))
        return per_head(q_KxGxTxH, k_KxSxH, v_KxSxH)

    out = jax.vmap(one_row)(q_BxKxGxTxH, k_BxKxSxH, v_BxKxSxH.astype(dtype), ids)
    return jnp.transpose(out, (0, 3, 1, 2, 4)).reshape(b, t, n, h)


def attention(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS, *, interpret: bool = False):
    """Causal GQA attention of a full pass (no cache), T == S; see the module docstring.

    Args:
      q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS: as in `models.attention.attention`.
      interpret: run the Pallas kernel in interpret mode (CPU tests).
    Returns:
      out_BxTxNxH in the dtype of q.
    """
    fn = functools.partial(_local, interpret=interpret)
    active = sharding.active()
    if active is None:
        return fn(q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS)
    mesh, rules = active
    n, kh = q_BxTxNxH.shape[2], k_BxKxHxS.shape[1]
    spec = functools.partial(sharding.logical_to_spec, mesh=mesh, rules=rules)
    heads = "heads" if kh % mesh.shape["tensor"] == 0 and n % mesh.shape["tensor"] == 0 else None
    kv_heads = "kv_heads" if heads else None
    specs = (
        spec(("batch", None, heads, None), q_BxTxNxH.shape),
        spec(("batch", kv_heads, None, None), k_BxKxHxS.shape),
        spec(("batch", kv_heads, None, None), v_BxKxSxH.shape),
        spec(("batch", None), valid_BxS.shape),
    )
    return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=specs[0], check_vma=False)(
        q_BxTxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS
    )
