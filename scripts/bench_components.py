"""The train step's parts, JAX vs PyTorch on CPU: where is our step slower?

  taskset -c 0 python scripts/bench_components.py [--size 3m|30m] [--rows 16]
      [--length 256] [--blocks 256,64] [--parts attention,mlp]

Times forward + backward (the outputs, and the gradients of a fixed random projection
of them in every input and weight) of each part of the bench model's train step, on
the same f32 shapes in both frameworks, and prints CPU ms (median of `--repeats`
after two warm-ups) and our speed relative to PyTorch's (torch ms / ours). The torch
side is transformers' Qwen3 code written out in torch ops (one thread). Per layer:

  projections  q/k/v from one fused matmul (`layers.fused_linear`, as `Attention` does)
               and o, vs four bias-free `torch.nn.Linear`;
  norms        the layer's four `layers.RMSNorm`s (input and post-attention over D,
               q and k per head) vs transformers' Qwen3RMSNorm;
  rope         `layers.apply_rope` on q and k (tables precomputed, no gradient) vs
               transformers' apply_rotary_pos_emb on the transposed q and k;
  mlp          our `layers.MLP` (SwiGLU, fused gate/up, CPU-laid-out dense backward) vs
               three bias-free `torch.nn.Linear` (transformers' Qwen3MLP);
  attention    our `attention.attention` kernel (blockwise at each of `--blocks`, and
               dense) on post-RoPE q, k, v
               vs `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`;
  layer        a whole `transformer.Block` (blockwise attention at each of `--blocks`)
               vs the same parts composed as transformers' Qwen3DecoderLayer.
Once per step:
  embedding    the token lookup and its (scatter-add) gradient vs `F.embedding`;
  loss         logits from final hidden states, log-softmax over the vocabulary and the
               token log-prob's mean (the GRPO loss's token term) vs the same in torch;
  optimizer    global-norm clip + AdamW on the whole model's params, given gradients:
               `optim.build_optimizer` (the trainer's optax chain) jitted with donated
               state, vs `clip_grad_norm_` + `torch.optim.AdamW` (bench_train's step).
Last, per block, the sum of parts (layers x per-layer parts + once-per-step parts).

Run on one core (`taskset -c 0`) with torch at one thread, so both use one core.
CPU time includes system time, so page faults on XLA:CPU's fresh per-call buffers
count: prefix `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` to see the parts without most of
them (docs/benchmarks.md, "The whole step's parts vs PyTorch").
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlvr_jax.models.attention import attention
from rlvr_jax.models.config import rope_inv_freq
from rlvr_jax.models.layers import MLP, Attention, RMSNorm, apply_rope, fused_linear, rope_cos_sin
from rlvr_jax.models.transformer import Block, init_model
from rlvr_jax.optim import build_optimizer
from rlvr_jax.testing import bench_config

LR = 1e-5  # scripts/bench_train.py's
PER_STEP = ("embedding", "loss", "optimizer")  # once per step; the rest once per layer


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


def _grad_step(f, diff, const):
    """A blocking callable: jitted jax.grad of f(diff, const) -> (scalar, outputs) in `diff`.

    The outputs are returned too, so XLA computes them as in the model, where the next
    part reads them (a gradient of sum(y * cot) alone would not need y: the forward's
    last matmul would be dropped). Every array is an argument: closed-over arrays would
    be compile-time constants, and XLA could fold a gradient that depends on constants
    only (RoPE's, the embedding's).
    """
    step = jax.jit(jax.grad(f, has_aux=True))
    return lambda: jax.block_until_ready(step(diff, const))


def _module_step(module, x, const, call=lambda m, x, c: m(x)):
    """Grads of sum(call(module, x, const) * const["cot"]) in the module's params and x."""
    graphdef, params = nnx.split(module)

    def f(diff, c):
        y = call(nnx.merge(graphdef, diff[0]), diff[1], c)
        return jnp.sum(y * c["cot"]), y

    return _grad_step(f, (params, x), const)


def _params(*modules):
    """(graphdef, params) of a list of modules, to merge back inside a traced function."""
    return nnx.split(nnx.List(modules))


def jax_parts(cfg, rows, length, blocks, rng):
    """{name: a callable running that part's forward + backward once (blocking)}."""
    b, t, d, v = rows, length, cfg.hidden_size, cfg.vocab_size
    n, k, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    x, cot_d = normal(b, t, d), normal(b, t, d)

    a = Attention(cfg, rngs=nnx.Rngs(0))
    proj_graph, proj_params = _params(a.q_proj, a.k_proj, a.v_proj, a.o_proj)
    cots = (normal(b, t, n * h), normal(b, t, k * h), normal(b, t, k * h), cot_d)

    def projections(diff, cots):  # q, k, v fused as Attention does; o on the heads' output
        params, x, a = diff
        q_proj, k_proj, v_proj, o_proj = nnx.merge(proj_graph, params)
        outs = (*fused_linear(x, (q_proj, k_proj, v_proj)), o_proj(a))
        return sum(jnp.sum(y * c) for y, c in zip(outs, cots, strict=True)), outs

    norm_kw = dict(eps=cfg.rms_norm_eps, param_dtype=jnp.float32, dtype=jnp.float32)
    norm_graph, norm_params = _params(*(RMSNorm(s, **norm_kw) for s in (d, d, h, h)))
    x2, q4, k4 = normal(b, t, d), normal(b, t, n, h), normal(b, t, k, h)
    cots4 = (cot_d, cot_d, normal(b, t, n, h), normal(b, t, k, h))

    def norms(diff, cots):  # input and post-attention norms over D, q and k norms per head
        params, *xs = diff
        outs = [norm(x) for norm, x in zip(nnx.merge(norm_graph, params), xs, strict=True)]
        return sum(jnp.sum(y * c) for y, c in zip(outs, cots, strict=True)), outs

    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    cos, sin = rope_cos_sin(positions, jnp.asarray(rope_inv_freq(cfg)))

    def rope(diff, c):
        outs = [apply_rope(x, c["cos"], c["sin"]) for x in diff]
        return sum(jnp.sum(y * cot) for y, cot in zip(outs, c["cots"], strict=True)), outs

    kk = jnp.asarray(rng.standard_normal((b, k, h, t)), jnp.float32)
    vv = jnp.asarray(rng.standard_normal((b, k, t, h)), jnp.float32)
    valid = jnp.ones((b, t), bool)

    def attn_step(impl, block=512):
        def f(diff, c):
            out = attention(*diff, c["valid"], impl=impl, block=block)
            return jnp.sum(out * c["cot"]), out

        return _grad_step(f, (q4, kk, vv), dict(valid=valid, cot=cots4[2]))

    def layer_step(block):
        def call(m, x, c):
            return m(x, c["cos"], c["sin"], c["valid"], impl="blockwise", block=block)[0]

        const = dict(cos=cos, sin=sin, valid=valid, cot=cot_d)
        return _module_step(Block(cfg, rngs=nnx.Rngs(0)), x, const, call)

    table = normal(v, d) * 0.02
    tokens = jnp.asarray(rng.integers(0, v, (b, t)), jnp.int32)

    def embedding(table, c):
        x = jnp.take(table, c["tokens"], axis=0)
        return jnp.sum(x * c["cot"]), x

    w = jnp.asarray(rng.standard_normal((d, v)) * 0.02, jnp.float32)

    def loss(diff, tokens):
        x, w = diff
        logp = jax.nn.log_softmax(jnp.dot(x, w), axis=-1)
        loss = -jnp.mean(jnp.take_along_axis(logp, tokens[..., None], axis=-1))
        return loss, loss

    _, params, _ = nnx.split(init_model(cfg, seed=0), nnx.Param, ...)
    opt = build_optimizer(LR, 1000, b2=0.999, clip_norm=1.0)
    grads = jax.tree.map(lambda p: normal(*p.shape) * 1e-3, params)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def opt_step(params, opt_state, grads):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    held = {"state": (params, opt.init(params))}

    def optimizer():
        held["state"] = jax.block_until_ready(opt_step(*held["state"], grads))

    blockwise = {f"attention (blockwise, block {n})": attn_step("blockwise", n) for n in blocks}
    layers = {f"layer (blockwise, block {n})": layer_step(n) for n in blocks}
    return {
        "projections": _grad_step(projections, (proj_params, x, normal(b, t, n * h)), cots),
        "norms": _grad_step(norms, (norm_params, x, x2, q4, k4), cots4),
        "rope": _grad_step(rope, (q4, k4), dict(cos=cos, sin=sin, cots=cots4[2:])),
        "mlp": _module_step(MLP(cfg, rngs=nnx.Rngs(0)), x, dict(cot=cot_d)),
        **blockwise,
        "attention (dense)": attn_step("xla"),
        **layers,
        "embedding": _grad_step(embedding, table, dict(tokens=tokens, cot=cot_d)),
        "loss": _grad_step(loss, (x, w), tokens),
        "optimizer": optimizer,
    }


def torch_parts(cfg, rows, length, rng):
    """The same parts in torch, transformers' Qwen3 code written out; keyed as jax_parts'
    names up to the first space."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    b, t, d, v = rows, length, cfg.hidden_size, cfg.vocab_size
    n, k, h, i = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size

    def leaf(*shape, scale=1.0):
        return torch.tensor(
            rng.standard_normal(shape) * scale, dtype=torch.float32
        ).requires_grad_()

    def const(*shape):
        return torch.tensor(rng.standard_normal(shape), dtype=torch.float32)

    def linear(d_in, d_out):
        return torch.nn.Linear(d_in, d_out, bias=False)

    def rms_norm(x, weight):  # transformers' Qwen3RMSNorm (f32 throughout here)
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + cfg.rms_norm_eps))

    inv_freq = torch.tensor(rope_inv_freq(cfg), dtype=torch.float32)
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1).expand(b, t, h)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, T, H]

    def rope(x):  # transformers' apply_rotary_pos_emb on [B, heads, T, H]
        x1, x2 = x[..., : h // 2], x[..., h // 2 :]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    x, cot_d = leaf(b, t, d), const(b, t, d)
    q_proj, k_proj, v_proj, o_proj = (
        linear(d, n * h),
        linear(d, k * h),
        linear(d, k * h),
        linear(n * h, d),
    )
    a_in = leaf(b, t, n * h)
    cot_q, cot_k, cot_v = const(b, t, n * h), const(b, t, k * h), const(b, t, k * h)

    def projections():
        out = (q_proj(x) * cot_q).sum() + (k_proj(x) * cot_k).sum() + (v_proj(x) * cot_v).sum()
        (out + (o_proj(a_in) * cot_d).sum()).backward()

    norm_w = [torch.ones(s, requires_grad=True) for s in (d, d, h, h)]  # pre, post, q, k
    x2, q4, k4 = leaf(b, t, d), leaf(b, t, n, h), leaf(b, t, k, h)
    cot_q4, cot_k4 = const(b, t, n, h), const(b, t, k, h)

    def norms():
        pre, post, qn, kn = norm_w
        out = (rms_norm(x, pre) * cot_d).sum() + (rms_norm(x2, post) * cot_d).sum()
        out = out + (rms_norm(q4, qn) * cot_q4).sum() + (rms_norm(k4, kn) * cot_k4).sum()
        out.backward()

    def rope_part():
        qr, kr = rope(q4.transpose(1, 2)), rope(k4.transpose(1, 2))
        ((qr * cot_q4.transpose(1, 2)).sum() + (kr * cot_k4.transpose(1, 2)).sum()).backward()

    gate, up, down = linear(d, i), linear(d, i), linear(i, d)

    def mlp_fwd(x):
        return down(F.silu(gate(x)) * up(x))

    def mlp():
        (mlp_fwd(x) * cot_d).sum().backward()

    q, kk, vv = leaf(b, n, t, h), leaf(b, k, t, h), leaf(b, k, t, h)
    cot_a = const(b, n, t, h)

    def attn():
        out = F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=True)
        (out * cot_a).sum().backward()

    def layer():  # transformers' Qwen3DecoderLayer (sdpa attention)
        pre, post, qn, kn = norm_w
        y = rms_norm(x, pre)
        qs = rope(rms_norm(q_proj(y).view(b, t, n, h), qn).transpose(1, 2))
        ks = rope(rms_norm(k_proj(y).view(b, t, k, h), kn).transpose(1, 2))
        vs = v_proj(y).view(b, t, k, h).transpose(1, 2)
        a = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
        x1 = x + o_proj(a.transpose(1, 2).reshape(b, t, n * h))
        ((x1 + mlp_fwd(rms_norm(x1, post))) * cot_d).sum().backward()

    table = leaf(v, d, scale=0.02)
    tokens = torch.tensor(rng.integers(0, v, (b, t)), dtype=torch.long)

    def embedding():
        (F.embedding(tokens, table) * cot_d).sum().backward()

    w = leaf(d, v, scale=0.02)

    def loss():
        logp = torch.log_softmax(x @ w, dim=-1)
        (-logp.gather(-1, tokens[..., None]).mean()).backward()

    _, params, _ = nnx.split(init_model(cfg, seed=0), nnx.Param, ...)
    weights = [torch.tensor(np.asarray(p), requires_grad=True) for p in jax.tree.leaves(params)]
    for p in weights:
        p.grad = torch.tensor(rng.standard_normal(p.shape) * 1e-3, dtype=torch.float32)
    opt = torch.optim.AdamW(weights, lr=LR, betas=(0.9, 0.999), weight_decay=0.0)

    def optimizer():
        torch.nn.utils.clip_grad_norm_(weights, 1.0)
        opt.step()

    return {
        "projections": projections,
        "norms": norms,
        "rope": rope_part,
        "mlp": mlp,
        "attention": attn,
        "layer": layer,
        "embedding": embedding,
        "loss": loss,
        "optimizer": optimizer,
    }


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
        f"{cfg.num_kv_heads}x{cfg.head_dim}, V={cfg.vocab_size}, {cfg.num_layers} layers), the "
        f"step's parts, {args.rows} x {args.length}, f32, forward + backward, CPU ms (median "
        f"of {args.repeats})"
    )
    print("| part | ours CPU ms | torch CPU ms | ours / torch speed |")
    print("|---|---|---|---|")
    ms = {}
    for name, fn in ours.items():
        ref = theirs[name.split(" ")[0]]
        ms[name] = a, t = _cpu_ms(fn, args.repeats), _cpu_ms(ref, args.repeats)
        print(f"| {name} | {a:.1f} | {t:.1f} | {t / a:.2f}x |", flush=True)
    print_sums(ms, cfg.num_layers, blocks)


def print_sums(ms, layers, blocks):
    """Per block: layers x (the layer's parts, or the whole-layer row) + once-per-step parts."""
    per_layer = ("projections", "norms", "rope", "mlp")
    rows = []
    for n in blocks:
        attn, layer = f"attention (blockwise, block {n})", f"layer (blockwise, block {n})"
        if all(p in ms for p in (*per_layer, attn, *PER_STEP)):
            rows.append((f"{layers} x ({' + '.join(per_layer)} + attention), block {n}",
                         [*per_layer, attn]))  # fmt: skip
        if all(p in ms for p in (layer, *PER_STEP)):
            rows.append((f"{layers} x layer, block {n}", [layer]))
    if not rows:
        return
    print(f"\nsums (+ {' + '.join(PER_STEP)} once)")
    print("| sum | ours CPU ms | torch CPU ms | ours / torch speed |")
    print("|---|---|---|---|")
    for label, parts in rows:
        a, t = (
            layers * sum(ms[p][i] for p in parts) + sum(ms[p][i] for p in PER_STEP) for i in (0, 1)
        )
        print(f"| {label} | {a:.0f} | {t:.0f} | {t / a:.2f}x |")


if __name__ == "__main__":
    main()
