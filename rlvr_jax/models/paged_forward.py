"""The transformer's forward pass over a paged KV cache: prefill chunks and decode steps.

The same `Transformer` modules as the dense path (no second copy of the
weights): `paged_forward` embeds the new tokens, runs every `Block` with a
`paged_attention.PagedKV` in place of the dense (k, v) cache, and applies the
final norm and output projection. Each row carries its own offset, so one
compiled program serves rows of any lengths and any page tables:

  row b's T new tokens are slots (= RoPE positions) q_offset_B[b] .. + T - 1;
  the first n_new_B[b] are real (written to the row's pages, attended to), the
  rest are padding (written to NULL_PAGE, never attended to; their logits are
  garbage);
  a prefill chunk is T = the chunk length, a decode step T = 1; a row idle this
  call has n_new = 0 (its table may be all NULL_PAGE).

Pages are allocated on the host by `rlvr_jax.sampling.pages.PagePool`: before
a call, every real token's slot must lie in a page of the row's table that the
row owns (refcount 1), as `PagePool.append_tokens` guarantees, and the
`PageCopy` of a fork must have been applied with `PagedKVCache.copy_pages`.

Logits equal the dense path's (`Transformer.forward`) at real positions up to
the online softmax's rounding (2e-6 in f32 on the tiny test model).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rlvr_jax.models.config import ModelConfig, rope_inv_freq
from rlvr_jax.models.layers import rope_cos_sin
from rlvr_jax.models.paged_attention import PagedKV, copy_pages
from rlvr_jax.models.transformer import HiddenPerturbation, perturb, zero_kv_stores
from rlvr_jax.sharding import constrain


@struct.dataclass
class PagedKVCache:
    """The device half of a paged KV cache: one page store per layer.

    Attributes:
      k: tuple over layers of k_pages_PxKxHxZ key stores (slots last).
      v: tuple over layers of v_pages_PxKxZxH value stores.
    """

    k: tuple
    v: tuple

    @classmethod
    def zeros(
        cls, config: ModelConfig, store_pages: int, page_size: int, dtype=None
    ) -> PagedKVCache:
        """An empty store (zeros: every slot finite, as the kernels need).

        Args:
          config: the model's config (layers, kv heads, head dim).
          store_pages: P, pages per layer including NULL_PAGE (`PagePool.store_pages`).
          page_size: Z, slots per page.
          dtype: storage dtype (default: the model's compute dtype).
        Returns:
          PagedKVCache with L stores of [P, K, H, Z] keys and [P, K, Z, H] values.
        """
        k, v = zero_kv_stores(config, store_pages, page_size, dtype)
        return cls(k=k, v=v)

    @property
    def page_size(self) -> int:
        return self.k[0].shape[-1]

    @property
    def store_pages(self) -> int:
        return self.k[0].shape[0]

    def copy_pages(self, src_C, dst_C) -> PagedKVCache:
        """Copies pages src_C[i] -> dst_C[i] in every layer (the `PageCopy`s of forks).

        Args:
          src_C, dst_C: int32 page ids (pad with NULL_PAGE pairs to a fixed C).
        Returns:
          The updated cache.
        """
        pairs = [copy_pages(k, v, src_C, dst_C) for k, v in zip(self.k, self.v, strict=True)]
        return PagedKVCache(k=tuple(k for k, _ in pairs), v=tuple(v for _, v in pairs))


def paged_forward(
    model,
    cache: PagedKVCache,
    tokens_BxT,
    page_table_BxM,
    q_offset_B,
    n_new_B,
    *,
    logits: str = "all",
    block_pages: int = 8,
    kernel: str = "jax",
    perturbation: HiddenPerturbation | None = None,
):
    """Runs `model` on T new tokens per row, reading and writing a paged KV cache.

    Jittable with static shapes: tables, offsets and counts are data, so rows of
    other lengths or pages reuse the compiled program.

    Args:
      model: a `Transformer` (its modules and weights are used as they are).
      cache: PagedKVCache of the model's layers.
      tokens_BxT: int32 new tokens (padding past n_new_B[b] may hold any id).
      page_table_BxM: int32 page ids per row, NULL_PAGE padded.
      q_offset_B: int32, the slot and position of each row's first new token
        (the tokens the row already holds in its pages).
      n_new_B: int32 in [0, T], real new tokens per row.
      logits: "all" ([B, T, V] float32) or "last" ([B, 1, V]: each row's last
        real new token, position n_new_B - 1; garbage for n_new = 0).
      block_pages: pages per softmax block of `paged_attention` (static).
      kernel: attention over pages, "jax" or "pallas" (TPU; `PagedKV.kernel`).
      perturbation: optional noise [B, T, D] added after block `layer` (NC-GRPO's
        latent noise, as `Transformer.forward`'s hook; zero where it must not act).
    Returns:
      (logits, the updated PagedKVCache).
    """
    if logits not in ("all", "last"):
        raise ValueError(f"logits={logits!r}; choose 'all' or 'last'")
    c = model.config
    if len(cache.k) != c.num_layers:
        raise ValueError(f"a paged cache of {len(cache.k)} layers for a {c.num_layers}-layer model")
    b, t = tokens_BxT.shape
    for name, x in (("page_table_BxM", page_table_BxM), ("q_offset_B", q_offset_B)):
        if jnp.shape(x)[0] != b:
            raise ValueError(f"{name} has {jnp.shape(x)[0]} rows for {b} rows of tokens")
    if jnp.shape(n_new_B) != (b,):
        raise ValueError(f"n_new_B of shape {jnp.shape(n_new_B)} for {b} rows of tokens")
    q_offset_B = jnp.asarray(q_offset_B, jnp.int32)
    n_new_B = jnp.asarray(n_new_B, jnp.int32)
    page_table_BxM = jnp.asarray(page_table_BxM, jnp.int32)
    # Pages hold no padding, so a token's position is its slot.
    positions_BxT = q_offset_B[:, None] + jnp.arange(t, dtype=jnp.int32)
    cos, sin = rope_cos_sin(positions_BxT, jnp.asarray(rope_inv_freq(c)))
    x = model.embed(tokens_BxT)
    new_k, new_v = [], []
    for i, block in enumerate(model.layers):
        kv = PagedKV(
            cache.k[i], cache.v[i], page_table_BxM, q_offset_B, n_new_B, block_pages, kernel
        )
        # kv_valid_BxS and q_offset are the dense cache's; a PagedKV carries its own.
        x, kv = block(x, cos, sin, None, 0, kv, impl=c.attention, block=c.attention_block)
        if perturbation is not None and i == perturbation.layer % c.num_layers:
            x = perturb(x, perturbation)
        x = constrain(x, ("batch", "length", "embed"))
        new_k.append(kv.k_pages_PxKxHxZ)
        new_v.append(kv.v_pages_PxKxZxH)
    if logits == "last":
        last_B = jnp.clip(n_new_B - 1, 0, t - 1)
        x = jnp.take_along_axis(x, last_B[:, None, None], axis=1)
    return model.logits_from_hidden(model.norm(x)), PagedKVCache(tuple(new_k), tuple(new_v))
