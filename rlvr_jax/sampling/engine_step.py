"""The rollout engine's device programs: a decode step over S slots and a chunked prefill.

Both run `paged_forward` on the model's own modules over one `PagedKVCache`
and take the cache as a donated argument, so a call updates the page store in
place instead of copying it. Every per-row quantity (page tables, offsets,
token counts, row ids, sampling knobs, stop ids) is data: one compiled program
per (slots, table width) for decoding and per (rows, chunk length) for
prefill, whatever the rows' lengths, pages or parameters.

Keying: the draw of row r's generated token j uses
`fold_in(fold_in(key, r), j)` (`row_keys`), so it depends on neither the
slot the row sits in, nor the step it is decoded at, nor the other rows: a
row preempted and resumed, or admitted late, draws the same tokens.

NC-GRPO's latent noise (`Noise`, static layer `noise_layer`): a noise row's
context position t gets `normal(fold_in(fold_in(split(key)[1], r), t)) · σ_r`
times the hidden RMS after block `noise_layer`, in the prefill chunks that
write its context and in the decode step that feeds its last context token;
keyed by (row, position) like the draws, so chunking, slots and preemption do
not change it. Positions at or past the row's context length get none.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlvr_jax.models.paged_forward import PagedKVCache, paged_forward
from rlvr_jax.models.transformer import HiddenPerturbation
from rlvr_jax.sampling.generate import in_compute_dtype
from rlvr_jax.sampling.step import sample_step


class DecodeOut(NamedTuple):
    """One decode step's per-slot results (garbage in idle slots).

    Attributes:
      tokens_S: int32 sampled tokens.
      logps_S: their log-probs under the temperature-1 model.
      sampling_logps_S: their log-probs under the sampled distribution (0 greedy).
      entropy_S: entropy of the temperature-1 distribution.
      stop_S: bool, an active slot sampled one of its stop ids.
    """

    tokens_S: jax.Array
    logps_S: jax.Array
    sampling_logps_S: jax.Array
    entropy_S: jax.Array
    stop_S: jax.Array


class Noise(NamedTuple):
    """Per-lane NC-GRPO noise inputs of a prefill or decode call.

    Attributes:
      row_id: int32 row ids (key the noise, `context_noise`).
      sigma: float32 σ per lane (0: a clean lane).
      until: int32 context length of the row: positions >= it get no noise.
    """

    row_id: jax.Array
    sigma: jax.Array
    until: jax.Array


def context_noise(key, noise: Noise, pos_BxT, dim: int):
    """[B, T, D] float32: σ_b · normal(fold_in(fold_in(split(key)[1], row_b), pos)) where
    pos < until_b (and σ_b > 0), else 0."""
    base = jax.random.split(key)[1]

    def one(r, t):
        return jax.random.normal(jax.random.fold_in(jax.random.fold_in(base, r), t), (dim,))

    z_BxTxD = jax.vmap(jax.vmap(one, (None, 0)), (0, 0))(noise.row_id, pos_BxT)
    on_BxT = pos_BxT < noise.until[:, None]
    return z_BxTxD * jnp.where(on_BxT, noise.sigma[:, None], 0.0)[..., None]


def _perturbation(key, noise, pos_BxT, layer, dim):
    if noise is None or layer is None:
        return None
    return HiddenPerturbation(context_noise(key, noise, pos_BxT, dim), layer=layer)


def row_keys(key, row_id_S, index_S):
    """Per-row keys `fold_in(fold_in(key, row_id), index)`.

    Args:
      key: the rollout's PRNG key.
      row_id_S: int32 row ids (the caller's, not slot numbers).
      index_S: int32 generated-token index j of the draw.
    Returns:
      [S] PRNG keys.
    """
    return jax.vmap(lambda r, j: jax.random.fold_in(jax.random.fold_in(key, r), j))(
        row_id_S, index_S
    )


def sample_rows(keys_S, logits_SxV, temperature_S, top_k_S, top_p_S):
    """`step.sample_step` with one key per row (each row a batch of one).

    A row's draw depends only on its key and its logits. Under vmap the
    sampler's "any row filters" branch would become a select, running the
    top-k/top-p sort every step; so the step decides it once for all rows
    (`lax.cond` outside the vmap) and a step in which no row filters runs the
    rows with unbatched "off" knobs, whose own check then skips the sort. The
    rows come out the same either way (an unfiltered row's logits are left as
    they are on both paths).

    Args:
      keys_S: [S] PRNG keys (`row_keys`).
      logits_SxV: float32 next-token logits.
      temperature_S, top_k_S, top_p_S: per-row knobs as in `sample_step`.
    Returns:
      (tokens_S, logp_S, sampling_logp_S, entropy_S), as `sample_step`.
    """

    def one(k, logits_V, t, top_k, top_p):
        return sample_step(k, logits_V[None], t[None], top_k[None], top_p[None])

    def filtered(keys, logits, temp):
        return jax.vmap(one)(keys, logits, temp, top_k_S, top_p_S)

    def unfiltered(keys, logits, temp):
        off_k, off_p = jnp.zeros((), jnp.int32), jnp.ones((), jnp.float32)
        return jax.vmap(one, in_axes=(0, 0, 0, None, None))(keys, logits, temp, off_k, off_p)

    v = logits_SxV.shape[-1]
    any_filter = jnp.any(((top_k_S > 0) & (top_k_S < v)) | (top_p_S < 1.0))
    outs = jax.lax.cond(any_filter, filtered, unfiltered, keys_S, logits_SxV, temperature_S)
    return tuple(x[:, 0] for x in outs)


def decode_step(
    state,
    cache: PagedKVCache,
    tokens_S,
    page_table_SxM,
    pos_S,
    active_S,
    key,
    row_id_S,
    index_S,
    temperature_S,
    top_k_S,
    top_p_S,
    stop_SxK,
    noise: Noise | None = None,
    *,
    graphdef,
    block_pages: int = 8,
    kernel: str = "jax",
    noise_layer: int | None = None,
):
    """Feeds each active slot's last token, then samples its next one.

    Args:
      state, graphdef: the model, split (`nnx.split`).
      cache: the page store (donated by `decode`).
      tokens_S: int32 token fed at slot s (its row's last context token).
      page_table_SxM: int32 page tables (NULL_PAGE for idle slots).
      pos_S: int32 position (= cache slot) of the fed token.
      active_S: bool, slots holding a row this step.
      key, row_id_S, index_S: see `row_keys`.
      temperature_S, top_k_S, top_p_S: per-row sampling knobs.
      stop_SxK: int32 stop ids per row, -1 padded.
      noise: the lanes' NC-GRPO noise (used with `noise_layer`; the module docstring).
      block_pages, kernel: static, as in `paged_forward`.
      noise_layer: static block after which the noise is added (None: no noise).
    Returns:
      (the updated cache, DecodeOut).
    """
    model = nnx.merge(graphdef, in_compute_dtype(state, graphdef))
    d = model.config.hidden_size
    logits_Sx1xV, cache = paged_forward(
        model,
        cache,
        tokens_S[:, None],
        page_table_SxM,
        pos_S,
        active_S.astype(jnp.int32),
        logits="last",
        block_pages=block_pages,
        kernel=kernel,
        perturbation=_perturbation(key, noise, pos_S[:, None], noise_layer, d),
    )
    keys_S = row_keys(key, row_id_S, index_S)
    tok_S, lp_S, slp_S, ent_S = sample_rows(
        keys_S, logits_Sx1xV[:, 0], temperature_S, top_k_S, top_p_S
    )
    stop_S = active_S & jnp.any(tok_S[:, None] == stop_SxK, axis=-1)
    return cache, DecodeOut(tok_S, lp_S, slp_S, ent_S, stop_S)


def prefill_chunk(
    state,
    cache: PagedKVCache,
    tokens_RxC,
    page_table_RxM,
    offset_R,
    n_new_R,
    key=None,
    noise: Noise | None = None,
    *,
    graphdef,
    block_pages: int = 8,
    kernel: str = "jax",
    noise_layer: int | None = None,
):
    """Writes one chunk of up to C context tokens per row into its pages.

    Args:
      state, graphdef: the model, split.
      cache: the page store (donated by `prefill`).
      tokens_RxC: int32 tokens, row r's first n_new_R[r] real (the rest any id).
      page_table_RxM: int32 page tables (the pages must already be allocated).
      offset_R: int32 slot of each row's first chunk token (tokens already cached).
      n_new_R: int32 in [0, C] real tokens per row (0: an idle lane).
      key, noise: the rollout's PRNG key and the lanes' NC-GRPO noise (with
        `noise_layer`; the module docstring).
      block_pages, kernel: static, as in `paged_forward`.
      noise_layer: static block after which the noise is added (None: no noise).
    Returns:
      The updated cache (no logits: the last context token is fed by `decode`).
    """
    model = nnx.merge(graphdef, in_compute_dtype(state, graphdef))
    c = tokens_RxC.shape[1]
    pos_RxC = jnp.asarray(offset_R, jnp.int32)[:, None] + jnp.arange(c, dtype=jnp.int32)
    _, cache = paged_forward(
        model,
        cache,
        tokens_RxC,
        page_table_RxM,
        offset_R,
        n_new_R,
        logits="last",
        block_pages=block_pages,
        kernel=kernel,
        perturbation=_perturbation(key, noise, pos_RxC, noise_layer, model.config.hidden_size),
    )
    return cache


def _copy(cache: PagedKVCache, src_C, dst_C) -> PagedKVCache:
    return cache.copy_pages(src_C, dst_C)


_STATIC = ("graphdef", "block_pages", "kernel", "noise_layer")
decode = jax.jit(decode_step, static_argnames=_STATIC, donate_argnames=("cache",))
prefill = jax.jit(prefill_chunk, static_argnames=_STATIC, donate_argnames=("cache",))
copy_pages = functools.partial(jax.jit, donate_argnums=0)(_copy)
