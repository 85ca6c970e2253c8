"""Transformer building blocks: RMSNorm, linear layers with optional LoRA, RoPE, attention, MLP.

Shape letters: B batch, T query length, S key/cache length, D hidden, N query
heads, K key/value heads, G = N // K query heads per kv head, H head dim,
F MLP width, R LoRA rank.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models.attention import attention
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.paged_attention import PagedKV
from rlvr_jax.sharding import constrain


class RMSNorm(nnx.Module):
    """RMSNorm computed in float32, scaled by a learned weight (HF convention)."""

    def __init__(self, dim: int, *, eps: float, param_dtype, dtype):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        # transformers casts back to the activation dtype before the weight multiply.
        return self.weight[...].astype(self.dtype) * x32.astype(self.dtype)


class LoRA(nnx.Module):
    """Low-rank update x @ A @ B * (alpha / R); B starts at zero so the model is unchanged."""

    def __init__(self, d_in: int, d_out: int, *, rank: int, alpha: float, param_dtype, rngs):
        if rank <= 0:
            raise ValueError(f"LoRA rank must be positive, got {rank}")
        bound = 1.0 / d_in**0.5
        self.a = nnx.LoRAParam(
            jax.random.uniform(rngs.params(), (d_in, rank), param_dtype, -bound, bound)
        )
        self.b = nnx.LoRAParam(jnp.zeros((rank, d_out), param_dtype))
        self.scale = alpha / rank

    def delta_kernel(self):
        """The dense [in, out] update this adapter adds to the base kernel."""
        a, b = self.a[...].astype(jnp.float32), self.b[...].astype(jnp.float32)
        return (a @ b) * self.scale

    def __call__(self, x, dtype):
        return ((x.astype(dtype) @ self.a[...].astype(dtype)) @ self.b[...].astype(dtype)) * (
            self.scale
        )


class Linear(nnx.Module):
    """y = x @ kernel (+ bias) (+ LoRA); kernel stored [in, out]."""

    def __init__(self, d_in: int, d_out: int, *, use_bias: bool, param_dtype, dtype, rngs):
        init = jax.nn.initializers.normal(0.02)
        self.kernel = nnx.Param(init(rngs.params(), (d_in, d_out), param_dtype))
        self.bias = nnx.Param(jnp.zeros((d_out,), param_dtype)) if use_bias else None
        self.lora: LoRA | None = None
        self.dtype = dtype

    def __call__(self, x):
        y = dense(x.astype(self.dtype), self.kernel[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        if self.lora is not None:
            y = y + self.lora(x, self.dtype)
        return y


@jax.custom_vjp
def dense(x, kernel):
    """x @ kernel over the last dim of x, with a backward pass laid out for XLA:CPU.

    Autodiff's weight gradient dot(x, dy) contracts x over its leading (row) dim,
    which XLA:CPU runs on its slow generic path; on CPU x is transposed first (an
    optimization barrier keeps XLA from folding the transpose back into the dot),
    so both backward matmuls are plain [M, K] @ [K, N] products (the 3m bench
    model's GRPO step: 12% less CPU time). Other backends get the plain product.
    """
    return jnp.dot(x, kernel)


def _dense_fwd(x, kernel):
    return jnp.dot(x, kernel), (x, kernel)


def _dense_bwd(res, dy):
    x, kernel = res
    k, n = kernel.shape
    x2, dy2 = x.reshape(-1, k), dy.reshape(-1, n)
    dx = jnp.dot(dy2, kernel.T).reshape(x.shape)
    x2_t = x2.T
    if jax.default_backend() == "cpu":  # elsewhere the transposed-left dot is native
        x2_t = jax.lax.optimization_barrier(x2_t)
    dk = jnp.dot(x2_t, dy2, preferred_element_type=jnp.float32)
    return dx.astype(x.dtype), dk.astype(kernel.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)


def _tensor_parallel() -> bool:
    active = sharding.active()
    return active is not None and active[0].shape["tensor"] > 1


def fused_linear(x, linears):
    """The outputs of several bias-sharing-free `Linear`s of one input, from one matmul.

    Their kernels are concatenated along the output dim (and biases, if any), so
    one [in, sum(out)] matmul replaces several narrow ones; LoRA is not handled.
    Under tensor parallelism (kernels split on the output dim) they run apart.

    Args:
      x: [..., in] input.
      linears: Linear modules with the same input width and no LoRA adapters.
    Returns:
      A tuple of outputs, one per module, as `linear(x)` would give.
    """
    if _tensor_parallel():  # kernels split on their output dim: concatenating would reshard
        return tuple(m(x) for m in linears)
    dtype = linears[0].dtype
    kernel = jnp.concatenate([m.kernel[...].astype(dtype) for m in linears], axis=1)
    y = dense(x.astype(dtype), kernel)
    if linears[0].bias is not None:
        y = y + jnp.concatenate([m.bias[...].astype(dtype) for m in linears])
    sizes = [m.kernel.shape[1] for m in linears]
    return tuple(jnp.split(y, list(itertools.accumulate(sizes[:-1])), axis=-1))


def rope_cos_sin(positions_BxT, inv_freq_H2):
    """cos/sin tables [B, T, H/2] in float32 for integer positions."""
    angles = positions_BxT.astype(jnp.float32)[..., None] * inv_freq_H2
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x_BxTxNxH, cos_BxTxH2, sin_BxTxH2):
    """Rotary embedding in the half-split layout transformers uses (rotate_half)."""
    dtype = x_BxTxNxH.dtype
    x1, x2 = jnp.split(x_BxTxNxH.astype(jnp.float32), 2, axis=-1)
    cos, sin = cos_BxTxH2[:, :, None, :], sin_BxTxH2[:, :, None, :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(dtype)


class Attention(nnx.Module):
    """Grouped-query self-attention with optional q/k norm and a KV cache."""

    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        kw = dict(param_dtype=c.jnp_param_dtype, dtype=c.jnp_dtype, rngs=rngs)
        self.q_proj = Linear(c.hidden_size, c.num_heads * c.head_dim, use_bias=c.qkv_bias, **kw)
        self.k_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, use_bias=c.qkv_bias, **kw)
        self.v_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, use_bias=c.qkv_bias, **kw)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, use_bias=c.o_bias, **kw)
        norm_kw = dict(eps=c.rms_norm_eps, param_dtype=c.jnp_param_dtype, dtype=c.jnp_dtype)
        self.q_norm = RMSNorm(c.head_dim, **norm_kw) if c.qk_norm else None
        self.k_norm = RMSNorm(c.head_dim, **norm_kw) if c.qk_norm else None
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.dtype = c.jnp_dtype

    def __call__(
        self, x_BxTxD, cos, sin, kv_valid_BxS, q_offset=0, kv_cache=None, *, impl="xla", block=512
    ):
        """Attends the T new positions to S keys (see models/attention.py for the mask rule).

        Args:
          x_BxTxD: layer input.
          cos, sin: RoPE tables [B, T, H/2] for the new positions.
          kv_valid_BxS: True at key slots holding a real token (with a cache: after
            the new tokens are written).
          q_offset: int32 scalar, the slot of the first new position (the cache index).
          kv_cache: None (keys are the T new positions, S == T), a (k, v)
            pair of [B, K, H, S] / [B, K, S, H] buffers (the new keys are written at
            `q_offset` and attention runs over the buffer's visible slots), or a
            `PagedKV` (the new keys go to each row's pages at its own offset and
            attention reads them through its page table; `kv_valid_BxS`,
            `q_offset`, `impl` and `block` are then unused).
          impl, block: the attention kernel (models.attention.IMPLS) and its block.
        Returns:
          (y_BxTxD, new (k, v), new PagedKV or None: the kind of `kv_cache`).
        """
        b, t, _ = x_BxTxD.shape
        n, k, h = self.num_heads, self.num_kv_heads, self.head_dim
        q, key, val = self._project_qkv(x_BxTxD)
        q, key, val = q.reshape(b, t, n, h), key.reshape(b, t, k, h), val.reshape(b, t, k, h)
        # Pins heads to the tensor axis under a mesh (no-op otherwise; see rlvr_jax.sharding).
        q = constrain(q, ("batch", "length", "heads", "head_dim"))
        key = constrain(key, ("batch", "length", "kv_heads", "head_dim"))
        val = constrain(val, ("batch", "length", "kv_heads", "head_dim"))
        if self.q_norm is not None:
            q, key = self.q_norm(q), self.k_norm(key)
        q, key = apply_rope(q, cos, sin), apply_rope(key, cos, sin)
        # Keys are kept as [B, K, H, S] and values as [B, K, S, H]: both attention
        # products are then plain batched matmuls with the contraction on the
        # fast axis, several times faster on CPU than the [B, S, K, H] layout.
        k_BxKxHxS = jnp.transpose(key, (0, 2, 3, 1))
        v_BxKxSxH = jnp.transpose(val, (0, 2, 1, 3))
        if isinstance(kv_cache, PagedKV):  # the cache kind is static: one path per program
            out, new_paged = kv_cache.write_and_attend(q, k_BxKxHxS, v_BxKxSxH)
            return self.o_proj(out.astype(self.dtype).reshape(b, t, n * h)), new_paged
        new_cache = None
        if kv_cache is not None:
            k_buf, v_buf = kv_cache
            k_BxKxHxS = jax.lax.dynamic_update_slice(
                k_buf, k_BxKxHxS.astype(k_buf.dtype), (0, 0, 0, q_offset)
            )
            v_BxKxSxH = jax.lax.dynamic_update_slice(
                v_buf, v_BxKxSxH.astype(v_buf.dtype), (0, 0, q_offset, 0)
            )
            new_cache = (k_BxKxHxS, v_BxKxSxH)
        out = attention(
            q, k_BxKxHxS, v_BxKxSxH, kv_valid_BxS, q_offset, impl=impl, block=block
        ).astype(self.dtype)
        return self.o_proj(out.reshape(b, t, n * h)), new_cache

    def _project_qkv(self, x_BxTxD):
        """q [B, T, N·H], k and v [B, T, K·H]: one fused matmul when no projection has LoRA."""
        projs = (self.q_proj, self.k_proj, self.v_proj)
        if any(p.lora is not None for p in projs):
            return tuple(p(x_BxTxD) for p in projs)
        return fused_linear(x_BxTxD, projs)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig, *, rngs):
        c = config
        kw = dict(use_bias=False, param_dtype=c.jnp_param_dtype, dtype=c.jnp_dtype, rngs=rngs)
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, **kw)
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, **kw)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, **kw)

    def __call__(self, x_BxTxD):
        projs = (self.gate_proj, self.up_proj)
        if any(p.lora is not None for p in projs):
            gate, up = (p(x_BxTxD) for p in projs)
        else:
            gate, up = fused_linear(x_BxTxD, projs)
        h_BxTxF = jax.nn.silu(gate) * up
        return self.down_proj(constrain(h_BxTxF, ("batch", "length", "mlp")))
