"""Sampler throughput: rlvr_jax vs transformers' `generate` on the same weights, on this machine.

Usage:
  python scripts/bench_sampler.py                 # the issue's two settings
  python scripts/bench_sampler.py --sizes 3m --repeats 5
  python scripts/bench_sampler.py --sizes long --execution attention=blockwise,attention_block=128

For each setting it builds a random Qwen3 model, saves it once in the Hugging
Face format and loads it in both libraries, then alternates timed runs of the two
samplers (temperature 1, no top-k/top-p, no stop tokens so both generate
exactly N tokens per row). It also times one decode step's dense matmuls alone in
each library's own layout (`decode_matmuls`): the floor under either sampler's step.
"long" is the 3m model with a 512-token prompt
and 512 new tokens, where a blockwise model (`--execution`, ModelConfig execution
options) attends only to the cache blocks filled so far. It also measures this
machine's f32 matmul FLOP/s and reports the fraction of it that decode reaches.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_train import parse_execution  # scripts/ is on sys.path when run as a script

from rlvr_jax.models import load_pretrained, save_pretrained
from rlvr_jax.models.transformer import init_model, with_execution
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import bench_config

SETTINGS = {
    "3m": dict(model="3m", batch=64, prompt=32, new=128),
    "30m": dict(model="30m", batch=32, prompt=32, new=256),
    "long": dict(model="3m", batch=16, prompt=512, new=512),
}


def matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
    """Best f32 matmul FLOP/s of jnp.dot on an n x n problem."""
    a = jnp.asarray(np.random.RandomState(0).randn(n, n).astype(np.float32))
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
    return 2 * n**3 / best


def decode_flops(cfg, batch: int, prompt: int, new: int) -> float:
    """Model FLOPs of generating `new` tokens per row after a `prompt`-token prefill.

    Matmuls (2 * non-embedding params + output projection) per token, plus attention
    score and value products over the cache prefix actually attended.
    """
    d, h = cfg.hidden_size, cfg.head_dim
    per_layer = d * h * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * d * cfg.intermediate_size
    dense = 2 * (cfg.num_layers * per_layer + d * cfg.vocab_size)
    attn_per_key = 2 * 2 * cfg.num_layers * cfg.num_heads * h
    keys = sum(prompt + i + 1 for i in range(new))
    return batch * (new * dense + attn_per_key * keys)


def _timed(fn, clock=time.perf_counter) -> float:
    t = clock()
    fn()
    return clock() - t


def decode_matmuls(cfg, batch: int, repeats: int = 50) -> tuple[float, float]:
    """Seconds of one decode step's dense matmuls alone: (jax, torch), medians.

    Each library multiplies in its own model's layout at the decode shape (`batch`
    rows of one token): ours fused q/k/v and gate/up as `models.layers` runs them,
    transformers' Qwen3 separate q, k, v, o, gate, up, down; every layer, then the
    output projection. Residual adds and the SwiGLU product keep the chain of
    dependencies; attention, norms and sampling are left out, so this is the floor
    that the matmuls alone put under a decode step. CPU time of the process (one
    thread each under `taskset -c N`), which load distorts less than wall time.
    """
    import torch

    cpu = time.process_time
    d, h, i, v = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    nq, nkv = cfg.num_heads * h, cfg.num_kv_heads * h
    rng = np.random.RandomState(0)

    def w(*shape):
        return (rng.randn(*shape) / np.sqrt(shape[0])).astype(np.float32)

    x = w(batch, d)
    fused = [(w(d, nq + 2 * nkv), w(nq, d), w(d, 2 * i), w(i, d)) for _ in range(cfg.num_layers)]
    lm = w(d, v)

    @jax.jit
    def jax_step(x, layers, lm):
        for qkv, o, gu, down in layers:
            y = x @ qkv
            x = x + y[:, :nq] @ o
            g = x @ gu
            x = x + (g[:, :i] * g[:, i:]) @ down
        return x @ lm

    args = (jnp.asarray(x), [tuple(map(jnp.asarray, t)) for t in fused], jnp.asarray(lm))
    jax_step(*args).block_until_ready()
    t_jax = statistics.median(
        _timed(lambda: jax_step(*args).block_until_ready(), cpu) for _ in range(repeats)
    )
    split = [
        tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in (
            qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:], o, gu[:, :i], gu[:, i:], down))
        for qkv, o, gu, down in fused
    ]  # fmt: skip
    tx, tlm = torch.from_numpy(x), torch.from_numpy(lm)

    def torch_step():
        with torch.no_grad():
            y = tx
            for q, k, vv, o, gate, up, down in split:
                qy, _, _ = y @ q, y @ k, y @ vv
                y = y + qy @ o
                y = y + ((y @ gate) * (y @ up)) @ down
            return y @ tlm

    torch_step()
    t_torch = statistics.median(_timed(torch_step, cpu) for _ in range(repeats))
    return t_jax, t_torch


def bench(size: str, repeats: int, peak: float, execution: dict) -> dict:
    import torch
    import transformers

    s = dict(SETTINGS[size])
    cfg = bench_config(s.pop("model"))
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(init_model(cfg, seed=0), cfg, d)
        model, cfg = load_pretrained(d)
        model = with_execution(model, **execution)
        cfg = model.config
        hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    rng = np.random.RandomState(0)
    prompts = rng.randint(3, cfg.vocab_size, (s["batch"], s["prompt"])).tolist()
    params = SamplingParams(temperature=1.0, max_new_tokens=s["new"])
    sampler = Sampler(model)

    def run_jax(seed):
        out = sampler.sample(prompts, params, jax.random.key(seed))
        assert out.response_mask.sum() == s["batch"] * s["new"]

    hf_ids = torch.tensor(prompts)
    gen_kw = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=s["new"],
        min_new_tokens=s["new"], pad_token_id=0, eos_token_id=None,
        attention_mask=torch.ones_like(hf_ids),
    )  # fmt: skip

    def run_hf(seed):
        torch.manual_seed(seed)
        with torch.no_grad():
            out = hf.generate(hf_ids, **gen_kw)
        assert out.shape == (s["batch"], s["prompt"] + s["new"])

    compile_s = _timed(lambda: run_jax(0))
    run_hf(0)  # warm-up
    t_jax, t_hf = [], []
    for r in range(repeats):  # interleaved, so drift hits both equally
        t_jax.append(_timed(lambda r=r: run_jax(r + 1)))
        t_hf.append(_timed(lambda r=r: run_hf(r + 1)))
    tokens = s["batch"] * s["new"]
    jax_tps, hf_tps = tokens / statistics.median(t_jax), tokens / statistics.median(t_hf)
    flops = decode_flops(cfg, s["batch"], s["prompt"], s["new"])
    step_jax, step_hf = (statistics.median(t) / s["new"] for t in (t_jax, t_hf))
    mm_jax, mm_hf = decode_matmuls(cfg, s["batch"])
    return dict(
        step_jax=step_jax,
        step_hf=step_hf,
        mm_jax=mm_jax,
        mm_hf=mm_hf,
        size=size,
        params=cfg.num_params(),
        **s,
        compile_s=compile_s,
        jax_tps=jax_tps,
        hf_tps=hf_tps,
        ratio=jax_tps / hf_tps,
        mfu=flops / statistics.median(t_jax) / peak,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--execution", default="", help="ModelConfig execution options k=v,...")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the cores taskset leaves us
    execution = parse_execution(args.execution)
    peak = matmul_peak_flops()
    print(f"machine: {os.cpu_count()} CPUs, jax {jax.__version__} ({jax.default_backend()}), "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"f32 matmul peak {peak / 1e9:.1f} GFLOP/s; execution {execution}; "
          f"load average {os.getloadavg()}")  # fmt: skip
    rows = [bench(size, args.repeats, peak, execution) for size in args.sizes]
    print("\n| model | params | batch | prompt | new | rlvr_jax tok/s | transformers tok/s "
          "| ratio | decode FLOP/s / peak | first call (compile) s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| qwen3-{r['size']} | {r['params'] / 1e6:.1f}M | {r['batch']} | {r['prompt']} "
              f"| {r['new']} | {r['jax_tps']:.0f} | {r['hf_tps']:.0f} | {r['ratio']:.2f}x "
              f"| {100 * r['mfu']:.1f}% | {r['compile_s']:.1f} |")  # fmt: skip
    print(
        "\nPer generated token (a whole call / new tokens, prefill included) against the "
        "decode step's dense matmuls alone (`decode_matmuls`), ms:"
    )
    print("\n| model | rlvr_jax step | its matmuls | step / matmuls | transformers step "
          "| its matmuls | step / matmuls | matmuls jax / torch |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sj, mj, sh, mh = (1e3 * r[k] for k in ("step_jax", "mm_jax", "step_hf", "mm_hf"))
        print(f"| qwen3-{r['size']} | {sj:.2f} | {mj:.2f} | {sj / mj:.2f} | {sh:.2f} | {mh:.2f} "
              f"| {sh / mh:.2f} | {mj / mh:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
