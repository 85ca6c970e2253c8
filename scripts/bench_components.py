"""The train step's parts, JAX vs PyTorch on CPU: where is our step slower?

  taskset -c 0 python scripts/bench_components.py [--size 3m] [--rows 16] [--length 256]
      [--blocks 256,64] [--parts attention]

Times forward + backward (gradients of a fixed random projection of the output with
respect to every input and weight) of each part of a decoder layer of the bench model,
on the same f32 shapes in both frameworks, and prints CPU ms (median of `--repeats`
after two warm-ups) and our speed relative to PyTorch's (torch ms / ours):

  mlp        our `layers.MLP` (SwiGLU, fused gate/up, CPU-laid-out dense backward) vs
             three bias-free `torch.nn.Linear` (transformers' Qwen3MLP);
  attention  our `attention.attention` kernel (blockwise at each of `--blocks`, and dense)
             on post-RoPE q, k, v
             vs `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`;
  loss       logits from final hidden states, log-softmax over the vocabulary and the
             token log-prob's mean (the GRPO loss's token term) vs the same in torch.

Run on one core (`taskset -c 0`) with torch at one thread, so both use one core.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models.attention import attention
from rlvr_jax.models.layers import MLP
from rlvr_jax.testing import bench_config


def _cpu_ms(fn, repeats: int) -> float:
    """Median CPU ms of fn() over `repeats` calls, after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1e3)
    return statistics.median(times)


def jax_parts(cfg, rows, length, blocks, rng):
    """{name: a callable running that part's forward + backward once (blocking)}."""
    b, t, d, v = rows, length, cfg.hidden_size, cfg.vocab_size
    n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    x = jnp.asarray(rng.standard_normal((b, t, d)), jnp.float32)
    mlp = MLP(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(mlp)
    cot_d = jnp.asarray(rng.standard_normal((b, t, d)), jnp.float32)

    @jax.jit
    def mlp_step(params, x):
        f = lambda p, x: jnp.sum(nnx.merge(graphdef, p)(x) * cot_d)  # noqa: E731
        return jax.grad(f, argnums=(0, 1))(params, x)

    q = jnp.asarray(rng.standard_normal((b, t, n, h)), jnp.float32)
    kk = jnp.asarray(rng.standard_normal((b, k, h, t)), jnp.float32)
    vv = jnp.asarray(rng.standard_normal((b, k, t, h)), jnp.float32)
    valid = jnp.ones((b, t), bool)
    cot_q = jnp.asarray(rng.standard_normal((b, t, n, h)), jnp.float32)

    def attn_step(impl, block=512):
        @jax.jit
        def step(q, kk, vv):
            def f(q, kk, vv):
                out = attention(q, kk, vv, valid, impl=impl, block=block)
                return jnp.sum(out * cot_q)

            return jax.grad(f, argnums=(0, 1, 2))(q, kk, vv)

        return lambda: jax.block_until_ready(step(q, kk, vv))

    w = jnp.asarray(rng.standard_normal((d, v)) * 0.02, jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, (b, t)), jnp.int32)

    @jax.jit
    def loss_step(x, w):
        def f(x, w):
            logp = jax.nn.log_softmax(jnp.dot(x, w), axis=-1)
            return -jnp.mean(jnp.take_along_axis(logp, tokens[..., None], axis=-1))

        return jax.grad(f, argnums=(0, 1))(x, w)

    blockwise = {f"attention (blockwise, block {n})": attn_step("blockwise", n) for n in blocks}
    return {
        "mlp": lambda: jax.block_until_ready(mlp_step(params, x)),
        **blockwise,
        "attention (dense)": attn_step("xla"),
        "loss": lambda: jax.block_until_ready(loss_step(x, w)),
    }


def torch_parts(cfg, rows, length, rng):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    b, t, d, v = rows, length, cfg.hidden_size, cfg.vocab_size
    n, k, h, i = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size

    def leaf(*shape, scale=1.0):
        return torch.tensor(
            rng.standard_normal(shape) * scale, dtype=torch.float32
        ).requires_grad_()

    x = leaf(b, t, d)
    gate, up, down = (torch.nn.Linear(*s, bias=False) for s in ((d, i), (d, i), (i, d)))
    cot_d = torch.tensor(rng.standard_normal((b, t, d)), dtype=torch.float32)

    def mlp():
        y = down(F.silu(gate(x)) * up(x))
        (y * cot_d).sum().backward()

    q, kk, vv = leaf(b, n, t, h), leaf(b, k, t, h), leaf(b, k, t, h)
    cot_q = torch.tensor(rng.standard_normal((b, n, t, h)), dtype=torch.float32)

    def attn():
        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=True)
        (out * cot_q).sum().backward()

    w = leaf(d, v, scale=0.02)
    tokens = torch.tensor(rng.integers(0, v, (b, t)), dtype=torch.long)

    def loss():
        logp = torch.log_softmax(x @ w, dim=-1)
        (-logp.gather(-1, tokens[..., None]).mean()).backward()

    return {"mlp": mlp, "attention": attn, "loss": loss}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="3m", help="testing.bench_config size")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--blocks", default="256,64", help="blockwise attention blocks, one row each")
    p.add_argument("--parts", default="", help="only these parts (comma list of prefixes)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    cfg = bench_config(args.size)
    rng = np.random.default_rng(0)
    blocks = [int(n) for n in args.blocks.split(",")]
    ours = jax_parts(cfg, args.rows, args.length, blocks, rng)
    if args.parts:
        ours = {k: f for k, f in ours.items() if k.startswith(tuple(args.parts.split(",")))}
    theirs = torch_parts(cfg, args.rows, args.length, rng)
    print(
        f"{args.size} (D={cfg.hidden_size}, I={cfg.intermediate_size}, heads {cfg.num_heads}/"
        f"{cfg.num_kv_heads}x{cfg.head_dim}, V={cfg.vocab_size}), one layer's parts, "
        f"{args.rows} x {args.length}, f32, forward + backward, CPU ms (median of "
        f"{args.repeats})"
    )
    print("| part | ours CPU ms | torch CPU ms | ours / torch speed |")
    print("|---|---|---|---|")
    for name, fn in ours.items():
        ref = theirs[name.split(" ")[0]]
        a, t = _cpu_ms(fn, args.repeats), _cpu_ms(ref, args.repeats)
        print(f"| {name} | {a:.1f} | {t:.1f} | {t / a:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
