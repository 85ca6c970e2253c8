"""The sampler's device program: prefill the context, then decode in one `lax.while_loop`.

`generate` is jitted by `sampling.Sampler` (one program per rows, context
bucket, N, cache dtype and noise layer); every other input is data.

The KV cache has P + N slots, rounded up to whole attention blocks when the
model attends blockwise: a decode step then reads only the blocks filled so far
(see models/attention.py), not the whole cache.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models.attention import resolve
from rlvr_jax.models.transformer import HiddenPerturbation, KVCache
from rlvr_jax.sampling.step import sample_step

MAX_STOP_IDS = 8


def cache_slots(config, prompt_len: int, max_new_tokens: int) -> int:
    """KV cache slots for a context bucket P and N new tokens (whole blocks if blockwise)."""
    slots = prompt_len + max_new_tokens
    impl, block = resolve(config.attention, config.attention_block, slots)
    if impl != "xla" and slots > block:
        slots = -(-slots // block) * block
    return slots


def kv_head_split(config, mesh) -> int:
    """How many ways the cache's kv heads split over `tensor` (1 when it does not divide)."""
    t = mesh.shape["tensor"]
    return t if config.num_kv_heads % t == 0 else 1


def kv_cache_bytes(config, rows: int, slots: int, dtype: str | None = None) -> int:
    """Bytes of a KV cache of `rows` x `slots` (keys and values of every layer).

    Args:
      config: ModelConfig.
      rows, slots: cache shape.
      dtype: storage dtype name (None: the model's compute dtype).
    Returns:
      Bytes over all devices.
    """
    itemsize = np.dtype(jnp.dtype(dtype or config.dtype)).itemsize
    per_slot = 2 * config.num_layers * config.num_kv_heads * config.head_dim
    return rows * slots * per_slot * itemsize


def work_bytes_per_row(config, prompt_len: int, max_new_tokens: int) -> int:
    """Working memory one row adds to a sampler call besides its KV cache, on one device.

    Counted from the buffers `generate` allocates per row (sharding aside):
      prefill   one block at a time over the P context positions: the MLP's gate and
                up projections, silu(gate), their product and its compute-dtype copy,
                counted as 5 f32 [P, I] buffers (the count that matches the compiled
                programs below), and one f32 [P, D] residual-stream buffer;
      decode    one step's f32 [V] vectors: logits, log-softmax, its exp, the scaled
                logits, the top-k/top-p sort, its softmax, cumulative mass and the
                sampling log-softmax (8 x 4 bytes x V);
      outputs   the [N] token, validity, log-prob, sampling log-prob and entropy
                buffers, twice (the loop's carry in and out).
    The prefill term dominates (Qwen3-8B at P = 1024: 0.25 GiB per row); against
    `plan.memory_plan` compiles of Qwen3-8B and Qwen2.5-7B (2 and 4 layers, 8 fake
    devices, 16 to 64 rows per device) it is within 10 % of the measured growth of
    the sampler's temp per row beyond the KV cache.

    Args:
      config: ModelConfig.
      prompt_len: P, the context bucket; max_new_tokens: N.
    Returns:
      Bytes per row (a call's rows split over the batch shards; not divided by a
      tensor axis, so an over-estimate under tensor parallelism).
    """
    prefill = prompt_len * (5 * 4 * config.intermediate_size + 4 * config.hidden_size)
    decode = 8 * 4 * config.vocab_size
    outputs = 2 * max_new_tokens * (4 + 1 + 3 * 4)
    return prefill + decode + outputs


def in_compute_dtype(state, graphdef):
    """Float params cast to the compute dtype once, before the loop.

    Every layer casts its weights to the compute dtype before using them, so this
    changes no value; done up front (on each device's shards) it keeps a decode loop
    under FSDP from gathering float32 weights when it needs bfloat16 ones.
    """
    dtype = nnx.merge(graphdef, state).config.jnp_dtype
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, state
    )


def generate(
    state,
    ctx_BxP,
    ctx_mask_BxP,
    key,
    temperature_B,
    top_k_B,
    top_p_B,
    stop_S,
    sigma_B,
    done_B,
    pad_id,
    *,
    graphdef,
    max_new_tokens: int,
    noise_layer: int | None,
    cache_dtype: str | None = None,
):
    """Prefill the context, then decode up to N tokens in one while_loop.

    `cache_dtype` ("bfloat16", "float32"; None: the model's compute dtype) is the
    KV cache's storage dtype; attention reads it in the compute dtype.

    Returns (tokens_BxN, valid_BxN, logps_BxN, sampling_logps_BxN, entropy_BxN, stopped_B).
    """
    model = nnx.merge(graphdef, in_compute_dtype(state, graphdef))
    bsz, p = ctx_BxP.shape
    n = max_new_tokens
    noise_key, sample_key = jax.random.split(key)
    perturbation = None
    if noise_layer is not None:
        cfg = model.config
        noise = jax.random.normal(noise_key, (bsz, p, cfg.hidden_size), jnp.float32)
        noise = noise * sigma_B[:, None, None] * ctx_mask_BxP[..., None]
        perturbation = HiddenPerturbation(noise, layer=noise_layer, relative_to_rms=True)
    slots = cache_slots(model.config, p, n)
    dtype = None if cache_dtype is None else jnp.dtype(cache_dtype)
    cache = sharding.constrain_cache(KVCache.zeros(model.config, bsz, slots, dtype))
    out = model.forward(
        ctx_BxP, ctx_mask_BxP, cache=cache, logits="last", perturbation=perturbation
    )

    zeros_f = jnp.zeros((bsz, n), jnp.float32)
    init = dict(
        step=jnp.zeros((), jnp.int32),
        cache=out.cache,
        logits=out.logits[:, 0],
        done=done_B,
        stopped=jnp.zeros((bsz,), bool),
        tokens=jnp.zeros((bsz, n), jnp.int32),
        valid=jnp.zeros((bsz, n), bool),
        logps=zeros_f,
        slogps=zeros_f,
        entropy=zeros_f,
    )

    def cond(c):
        return (c["step"] < n) & ~jnp.all(c["done"])

    def body(c):
        step = c["step"]
        tok, lp, slp, ent = sample_step(
            jax.random.fold_in(sample_key, step), c["logits"], temperature_B, top_k_B, top_p_B
        )
        live = ~c["done"]
        tok = jnp.where(live, tok, pad_id)
        is_stop = live & jnp.any(tok[:, None] == stop_S[None, :], axis=-1)

        def put(buf, col):
            return jax.lax.dynamic_update_slice(buf, col[:, None].astype(buf.dtype), (0, step))

        nxt = model.forward(tok[:, None], live[:, None], cache=c["cache"], logits="last")
        return dict(
            step=step + 1,
            cache=sharding.constrain_cache(nxt.cache),
            logits=nxt.logits[:, 0],
            done=c["done"] | is_stop,
            stopped=c["stopped"] | is_stop,
            tokens=put(c["tokens"], tok),
            valid=put(c["valid"], live),
            logps=put(c["logps"], jnp.where(live, lp, 0.0)),
            slogps=put(c["slogps"], jnp.where(live, slp, 0.0)),
            entropy=put(c["entropy"], jnp.where(live, ent, 0.0)),
        )

    init["cache"] = sharding.constrain_cache(init["cache"])
    c = jax.lax.while_loop(cond, body, init)
    return c["tokens"], c["valid"], c["logps"], c["slogps"], c["entropy"], c["stopped"]
