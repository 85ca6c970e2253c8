"""Decoder-only transformer (Qwen3 / Qwen2 / Llama 3) in Flax NNX, with a KV cache.

`model(input_ids_BxT, attention_mask=mask_BxT)` returns float32 logits; positions
come from the mask (cumulative count of real tokens), so left and right padding
both give the same logits at real positions. `model.forward(...)` exposes the
rest: the final hidden states (after the final norm), a KV cache for decoding,
logits at the last position only, and a perturbation hook on hidden states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx, struct

from rlvr_jax.models.config import ModelConfig, rope_inv_freq
from rlvr_jax.models.layers import MLP, Attention, RMSNorm, rope_cos_sin
from rlvr_jax.sharding import constrain

_ACT = ("batch", "length", "embed")


def zero_kv_stores(config: ModelConfig, leading: int, slots: int, dtype=None):
    """Per-layer zero key and value stores: L × [leading, K, H, slots] keys and
    [leading, K, slots, H] values (leading = rows of a dense cache or pages of a paged
    one; dtype default the compute dtype)."""
    dtype = dtype or config.jnp_dtype
    k_shape = (leading, config.num_kv_heads, config.head_dim, slots)
    v_shape = (leading, config.num_kv_heads, slots, config.head_dim)
    k = tuple(jnp.zeros(k_shape, dtype) for _ in range(config.num_layers))
    v = tuple(jnp.zeros(v_shape, dtype) for _ in range(config.num_layers))
    return k, v


@struct.dataclass
class KVCache:
    """Decoding state: per-layer key/value buffers and which slots hold real tokens.

    Attributes:
      k: tuple over layers of [B, K, H, S] key buffers (S last: see Attention).
      v: tuple over layers of [B, K, S, H] value buffers.
      valid_BxS: True at slots written with a real (non-padding) token.
      next_pos_B: position id the next real token of each row gets.
      index: int32 scalar, the next slot to write (same for every row).
    """

    k: tuple
    v: tuple
    valid_BxS: jax.Array
    next_pos_B: jax.Array
    index: jax.Array

    @classmethod
    def zeros(cls, config: ModelConfig, batch: int, length: int, dtype=None) -> KVCache:
        k, v = zero_kv_stores(config, batch, length, dtype)
        return cls(
            k=k,
            v=v,
            valid_BxS=jnp.zeros((batch, length), bool),
            next_pos_B=jnp.zeros((batch,), jnp.int32),
            index=jnp.zeros((), jnp.int32),
        )

    @property
    def length(self) -> int:
        return self.valid_BxS.shape[1]


@struct.dataclass
class HiddenPerturbation:
    """Adds `noise_BxTxD` to the output of block `layer` (NC-GRPO's latent noise).

    With `relative_to_rms`, the noise is multiplied by each position's hidden-state
    RMS, so sigma is in units of the activation scale. The caller zeroes the noise
    at positions it must not touch (e.g. everything but the prompt).
    """

    noise_BxTxD: jax.Array
    layer: int = struct.field(pytree_node=False, default=-1)
    relative_to_rms: bool = struct.field(pytree_node=False, default=True)


@struct.dataclass
class ModelOutput:
    logits: jax.Array | None  # [B, T, V] float32 ([B, 1, V] with last_only)
    hidden: jax.Array | None  # [B, T, D] after the final norm, when requested
    cache: KVCache | None


class Block(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs):
        kw = dict(
            eps=config.rms_norm_eps, param_dtype=config.jnp_param_dtype, dtype=config.jnp_dtype
        )
        self.input_layernorm = RMSNorm(config.hidden_size, **kw)
        self.self_attn = Attention(config, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, **kw)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(self, x, cos, sin, kv_valid_BxS, q_offset=0, kv_cache=None, *, impl, block):
        attn, kv_cache = self.self_attn(
            self.input_layernorm(x), cos, sin, kv_valid_BxS, q_offset, kv_cache,
            impl=impl, block=block,
        )  # fmt: skip
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv_cache


_REMAT = {
    "block": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Transformer(nnx.Module):
    """A causal language model. Build with `Transformer(config, rngs=nnx.Rngs(seed))`."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        c = config
        self.embed_tokens = nnx.Param(
            jax.nn.initializers.normal(0.02)(
                rngs.params(), (c.vocab_size, c.hidden_size), c.jnp_param_dtype
            )
        )
        self.layers = nnx.List([Block(c, rngs=rngs) for _ in range(c.num_layers)])
        self.norm = RMSNorm(
            c.hidden_size, eps=c.rms_norm_eps, param_dtype=c.jnp_param_dtype, dtype=c.jnp_dtype
        )
        self.lm_head = (
            None
            if c.tie_word_embeddings
            else nnx.Param(
                jax.nn.initializers.normal(0.02)(
                    rngs.params(), (c.hidden_size, c.vocab_size), c.jnp_param_dtype
                )
            )
        )

    def __call__(self, input_ids_BxT, attention_mask=None):
        """Float32 logits [B, T, V] of a (possibly padded) batch."""
        return self.forward(input_ids_BxT, attention_mask).logits

    def output_kernel(self):
        """The [D, V] output projection W (tied: the embedding transposed)."""
        if self.lm_head is None:
            return self.embed_tokens[...].T
        return self.lm_head[...]

    def embed(self, input_ids_BxT):
        """Token embeddings [B, T, D] in the compute dtype."""
        # The lookup reads whole rows: gather the table's embed dim (FSDP) before it, or
        # GSPMD cannot move the gathered rows onto the batch layout efficiently.
        table_VxD = constrain(self.embed_tokens[...], ("vocab", None))
        x = jnp.take(table_VxD, input_ids_BxT, axis=0).astype(self.config.jnp_dtype)
        return constrain(x, _ACT)

    def logits_from_hidden(self, hidden_BxTxD):
        """Float32 logits from final (normed) hidden states."""
        dtype = self.config.jnp_dtype
        logits_BxTxV = jnp.dot(
            hidden_BxTxD.astype(dtype),
            self.output_kernel().astype(dtype),
            preferred_element_type=jnp.float32,
        )
        return constrain(logits_BxTxV, ("batch", "length", "vocab"))

    def forward(
        self,
        input_ids_BxT,
        attention_mask=None,
        *,
        cache: KVCache | None = None,
        return_hidden: bool = False,
        logits: str = "all",
        perturbation: HiddenPerturbation | None = None,
    ) -> ModelOutput:
        """Runs the model on T new tokens per row.

        Args:
          input_ids_BxT: int token ids.
          attention_mask: [B, T] 1 for real tokens, 0 for padding (default all 1).
          cache: None for a full causal pass; else a KVCache the new tokens are
            appended to (at `cache.index`); they attend to every valid slot before them.
          return_hidden: also return the final hidden states [B, T, D].
          logits: "all" ([B, T, V]), "last" (only the last position, [B, 1, V];
            for prefill with left-padded prompts) or "none".
          perturbation: optional HiddenPerturbation hook.
        Returns:
          ModelOutput(logits, hidden or None, updated cache or None).
        """
        c = self.config
        b, t = input_ids_BxT.shape
        if attention_mask is None:
            attention_mask = jnp.ones((b, t), bool)
        mask_BxT = attention_mask.astype(bool)
        offset_B = jnp.zeros((b,), jnp.int32) if cache is None else cache.next_pos_B
        positions_BxT = offset_B[:, None] + jnp.cumsum(mask_BxT, axis=1, dtype=jnp.int32) - 1
        positions_BxT = jnp.maximum(positions_BxT, 0)
        cos, sin = rope_cos_sin(positions_BxT, jnp.asarray(rope_inv_freq(c)))

        if cache is None:
            valid_BxS, q_offset = mask_BxT, 0
        else:
            if t > cache.length:
                raise ValueError(f"{t} new tokens do not fit a KV cache of length {cache.length}")
            valid_BxS = jax.lax.dynamic_update_slice(cache.valid_BxS, mask_BxT, (0, cache.index))
            q_offset = cache.index

        x = self.embed(input_ids_BxT)
        kw = dict(impl=c.attention, block=c.attention_block)
        if cache is None and perturbation is None and c.scan_layers and _stackable(self.layers):
            x = _scan_blocks(self.layers, x, cos, sin, valid_BxS, c.remat, kw)
        else:
            new_k, new_v = [], []
            pert_layer = None if perturbation is None else perturbation.layer % c.num_layers
            for i, block in enumerate(self.layers):
                kv = None if cache is None else (cache.k[i], cache.v[i])
                x, kv = _call_block(block, c.remat, kw, x, cos, sin, valid_BxS, q_offset, kv)
                x = constrain(x, _ACT)
                if cache is not None:
                    new_k.append(kv[0])
                    new_v.append(kv[1])
                if i == pert_layer:
                    x = perturb(x, perturbation)
        hidden = self.norm(x)

        out_logits = None
        if logits == "all":
            out_logits = self.logits_from_hidden(hidden)
        elif logits == "last":
            out_logits = self.logits_from_hidden(hidden[:, -1:])
        elif logits != "none":
            raise ValueError(f"logits={logits!r}; choose 'all', 'last' or 'none'")
        new_cache = None
        if cache is not None:
            new_cache = KVCache(
                k=tuple(new_k),
                v=tuple(new_v),
                valid_BxS=valid_BxS,
                next_pos_B=cache.next_pos_B + mask_BxT.sum(axis=1, dtype=jnp.int32),
                index=cache.index + t,
            )
        return ModelOutput(out_logits, hidden if return_hidden else None, new_cache)


def _call_block(block, remat, kw, x, cos, sin, valid_BxS, q_offset, kv):
    """One block; a full pass (no cache) is rematerialised per `remat` (ModelConfig.remat)."""
    if remat == "none" or kv is not None:
        return block(x, cos, sin, valid_BxS, q_offset, kv, **kw)
    graphdef, state = nnx.split(block)

    def run(state, x, cos, sin, valid_BxS):
        return nnx.merge(graphdef, state)(x, cos, sin, valid_BxS, 0, None, **kw)

    return jax.checkpoint(run, policy=_REMAT[remat])(state, x, cos, sin, valid_BxS)


def _stackable(blocks) -> bool:
    """Every block has one structure (no LoRA on some layers only): their params stack."""
    first = nnx.graphdef(blocks[0])
    return all(nnx.graphdef(b) == first for b in blocks[1:])


def _scan_blocks(blocks, x, cos, sin, valid_BxS, remat, kw):
    """The blocks of a full pass as one `lax.scan` over their params, stacked here.

    The model keeps one module per layer (checkpoints, LoRA and sharding rules
    see the same tree); the stack is a copy of the block params made inside the
    traced program, so XLA compiles one block instead of L.
    """
    graphdef = nnx.graphdef(blocks[0])
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *(nnx.state(b) for b in blocks))

    def body(x, state):
        y, _ = nnx.merge(graphdef, state)(x, cos, sin, valid_BxS, 0, None, **kw)
        return constrain(y, _ACT), None

    if remat != "none":
        body = jax.checkpoint(body, policy=_REMAT[remat])
    return jax.lax.scan(body, x, stacked)[0]


def perturb(x_BxTxD, perturbation: HiddenPerturbation):
    """x + noise (times each position's hidden RMS when `relative_to_rms`), in x's dtype."""
    noise = perturbation.noise_BxTxD.astype(jnp.float32)
    if perturbation.relative_to_rms:
        x32 = x_BxTxD.astype(jnp.float32)
        noise = noise * jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True))
    return (x_BxTxD.astype(jnp.float32) + noise).astype(x_BxTxD.dtype)


def with_execution(model: Transformer, **options) -> Transformer:
    """`model`'s params (the same arrays, not copied) under other execution options.

    Args:
      model: a Transformer.
      **options: attention, attention_block, scan_layers and/or remat (see
        ModelConfig); options that change param dtypes are not accepted here.
    Returns:
      A Transformer computing the same function another way.
    """
    allowed = ("attention", "attention_block", "scan_layers", "remat")
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ValueError(f"not execution options: {bad}; valid: {allowed}")
    out = nnx.merge(*nnx.split(model))
    out.config = model.config.replace(**options)
    return out


def init_model(config: ModelConfig, seed: int = 0) -> Transformer:
    """A randomly initialised model (HF-style N(0, 0.02) weights)."""
    return Transformer(config, rngs=nnx.Rngs(seed))


def abstract_model(config: ModelConfig) -> Transformer:
    """The model with ShapeDtypeStruct leaves: structure without allocation."""
    return nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
