"""Train-step throughput: tokens/s and model FLOP utilisation of the GRPO update, vs PyTorch.

Usage (pin to one core so that both frameworks get the same compute and
other processes do not steal it; every number then is per core):
  taskset -c 1 python scripts/bench_train.py peak                    # matmul FLOP/s
  taskset -c 1 python scripts/bench_train.py step --sizes 3m,30m --lengths 256,1024
  taskset -c 1 python scripts/bench_train.py scaling --size 3m
  taskset -c 1 python scripts/bench_train.py memory --lengths 2048,4096,8192

peak: the best f32 FLOP/s of a jitted square matmul (n = 1024, 2048, 3072),
  the ceiling MFU is measured against (torch's matmul printed alongside).
step: one optimizer update of the PPO-clip GRPO loss (rlvr_jax.rl.update.make_update:
  forward, backward, global-norm clip, AdamW) on `--rows` x T tokens, for
  each bench model (rlvr_jax.testing.bench_config), against the same step
  written in PyTorch on the same weights and batch: the transformers
  Qwen3ForCausalLM (its default attention), the same log-prob gather, clipped
  surrogate, sequence-mean-token-mean aggregation, clip_grad_norm_ and
  torch.optim.AdamW. The first-step losses of the two are printed to show it is
  one computation. Model FLOPs per step = tokens x (6 N + 12 L d_attn T), N the
  parameters used in matmuls (embedding lookup excluded, output projection
  included), the PaLM accounting (full, not causal, attention); XLA's own count
  of the compiled step is printed too.
scaling: step time as the sequence length and the rows (group size x prompts) double.
compile: CPU time to compile one update of `--size` at `--layers` layers, layers
  unrolled vs scanned.
memory: one update of a single row of T tokens on the 3m model, each T in a fresh
  process: peak resident memory (ru_maxrss), and XLA's planned temp buffers.
Our model runs with `--execution` (ModelConfig execution options, e.g.
"attention=blockwise,attention_block=256,remat=block"; see models/config.py).
Timing: compile + 2 warm-up steps, then `--repeats` steps alternating the two
frameworks; medians of wall time and of this process's CPU time (the CPU time
is what a shared, loaded machine distorts least).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models.checkpoint import load_pretrained
from rlvr_jax.models.transformer import init_model, with_execution
from rlvr_jax.rl import objectives
from rlvr_jax.rl.update import RLState, build_optimizer, make_update
from rlvr_jax.testing import bench_config

EPS = 0.2
LR = 1e-5


def cores() -> int:
    return len(os.sched_getaffinity(0))


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def parse_execution(text: str) -> dict:
    """Parses "attention=blockwise,remat=block" into ModelConfig execution options."""
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        out[k] = v == "true" if v in ("true", "false") else int(v) if v.isdigit() else v
    return out


# --------------------------------------------------------------------------- peak


def matmul_peak(sizes=(1024, 2048, 3072), repeats: int = 5) -> dict[str, float]:
    """Best f32 matmul FLOP/s (by CPU time) of jax (and torch) on this process's cores."""
    import torch

    torch.set_num_threads(cores())
    out = {"jax": 0.0, "torch": 0.0}
    for n in sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
        f = jax.jit(lambda x: x @ x)
        jax.block_until_ready(f(a))
        t = min(_timed(lambda f=f, a=a: jax.block_until_ready(f(a)))[1] for _ in range(repeats))
        out["jax"] = max(out["jax"], 2 * n**3 / t)
        ta = torch.randn(n, n)
        ta @ ta
        t = min(_timed(lambda ta=ta: ta @ ta)[1] for _ in range(repeats))
        out["torch"] = max(out["torch"], 2 * n**3 / t)
    return out


# --------------------------------------------------------------------------- step


def make_batch(cfg, rows: int, length: int, prompt: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random tokens; loss on positions >= prompt; old log-probs and row advantages."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((rows, length), bool)
    mask[:, prompt:] = True
    return {
        "tokens_BxT": rng.integers(3, cfg.vocab_size, (rows, length)).astype(np.int32),
        "attention_mask_BxT": np.ones((rows, length), bool),
        "mask_BxT": mask,
        "old_logps_BxT": np.where(mask, rng.normal(-9, 0.3, (rows, length)), 0).astype(np.float32),
        "adv_BxT": np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32),
    }


def model_flops(cfg, rows: int, length: int) -> float:
    """PaLM-style training FLOPs of one step: tokens x (6 N_matmul + 12 L d_attn T)."""
    n = cfg.num_params() - cfg.vocab_size * cfg.hidden_size * (not cfg.tie_word_embeddings)
    attn = 12 * cfg.num_layers * cfg.num_heads * cfg.head_dim * length
    return rows * length * (6 * n + attn)


def save_hf(cfg, path: str):
    """A random transformers model of cfg's architecture, saved to path; returns it."""
    import torch
    import transformers

    torch.manual_seed(0)
    hf = transformers.AutoConfig.for_model(**cfg.to_hf_dict())
    model = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.float32)
    model.save_pretrained(path)
    return model


def jax_step(model, batch):
    """(step_fn returning the loss, compiled step) for our update of `model`."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    spec = objectives.LossSpec(
        "ppo_clip", (("dual_clip", 0.0), ("eps_high", EPS), ("eps_low", EPS))
    )
    opt = build_optimizer(LR, 1000, b2=0.999, clip_norm=1.0)
    update = make_update(graphdef, opt, spec)
    state = RLState(
        params, opt.init(params), None, None, jnp.zeros((), jnp.int32), jax.random.PRNGKey(0)
    )
    mb = {k: jnp.asarray(v)[None] for k, v in batch.items()}  # one micro-batch
    compiled = update.lower(state, rest, None, mb).compile()
    holder = {"state": state}

    def step():
        holder["state"], metrics = compiled(holder["state"], rest, None, mb)
        return float(metrics["loss"])

    return step, compiled


def xla_flops(compiled) -> float:
    try:  # best effort; the timing does not need it
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return float(cost.get("flops", float("nan")))
    except (AttributeError, KeyError, TypeError):
        return float("nan")


def torch_step(model, batch):
    """The same GRPO update in PyTorch (eager, the framework's default path)."""
    import torch

    torch.set_num_threads(cores())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=0.0)
    tokens = torch.from_numpy(batch["tokens_BxT"]).long()
    attn = torch.from_numpy(batch["attention_mask_BxT"]).long()
    mask = torch.from_numpy(batch["mask_BxT"][:, 1:]).float()
    old = torch.from_numpy(batch["old_logps_BxT"][:, 1:])
    adv = torch.from_numpy(batch["adv_BxT"][:, 1:])

    def step():
        logits = model(input_ids=tokens, attention_mask=attn).logits[:, :-1]
        logps = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]
        ratio = torch.exp(logps - old)
        surr = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - EPS, 1 + EPS) * adv)
        per_seq = (-surr * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        loss = per_seq.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    return step


def run_pair(size, rows, length, prompt, repeats, torch_too, execution):
    """Times our step (and torch's) for one model and batch; returns a result dict."""
    cfg = bench_config(size)
    batch = make_batch(cfg, rows, length, prompt)
    with tempfile.TemporaryDirectory() as d:
        hf_model = save_hf(cfg, d)
        model, _ = load_pretrained(d)
    t0 = time.process_time()
    ours, compiled = jax_step(with_execution(model, **execution), batch)
    compile_s = time.process_time() - t0
    loss_ours = ours()  # first step (initial weights)
    theirs = torch_step(hf_model, batch) if torch_too else None
    loss_theirs = theirs() if theirs else float("nan")
    for _ in range(2):
        ours()
        if theirs:
            theirs()
    t_ours, t_theirs = [], []
    for _ in range(repeats):  # alternating, so load drift hits both
        t_ours.append(_timed(ours))
        if theirs:
            t_theirs.append(_timed(theirs))
    med = lambda ts, i: statistics.median(t[i] for t in ts) if ts else float("nan")  # noqa: E731
    return dict(
        size=size,
        params_m=cfg.num_params() / 1e6,
        flops=model_flops(cfg, rows, length),
        xla_flops=xla_flops(compiled),
        compile_s=compile_s,
        wall_ours=med(t_ours, 0),
        cpu_ours=med(t_ours, 1),
        wall_theirs=med(t_theirs, 0),
        cpu_theirs=med(t_theirs, 1),
        loss_ours=loss_ours,
        loss_theirs=loss_theirs,
    )


# ------------------------------------------------------------------------- memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_one(length: int, execution: dict) -> None:
    """One update of 1 x `length` tokens on the 3m model; prints its memory (one process)."""
    cfg = bench_config("3m").replace(max_position_embeddings=max(4096, length))
    model = with_execution(init_model(cfg, seed=0), **execution)
    batch = make_batch(cfg, 1, length, 64)
    base = _rss_bytes()
    step, compiled = jax_step(model, batch)
    temp = compiled.memory_analysis().temp_size_in_bytes
    after_compile = _rss_bytes()
    wall, cpu = _timed(step)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"RESULT {length} {base} {after_compile} {_rss_bytes()} {peak} {temp} {wall:.2f} {cpu:.2f}"
    )


def memory(lengths, execution_text: str) -> None:
    print(f"# 3m model, 1 row, execution {execution_text!r}; MiB")
    print("| T | XLA temp | RSS before compile | RSS after step | peak RSS | step wall s |")
    print("|---|---|---|---|---|---|")
    for length in lengths:
        out = subprocess.run(
            [sys.executable, __file__, "memory-one", "--length", str(length),
             "--execution", execution_text],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        vals = next(line for line in out.splitlines() if line.startswith("RESULT")).split()[1:]
        t, base, _, after, peak, temp = (int(v) for v in vals[:6])
        mib = lambda b: f"{b / 2**20:.0f}"  # noqa: E731
        print(
            f"| {t} | {mib(temp)} | {mib(base)} | {mib(after)} | {mib(peak)} | {vals[6]} |",
            flush=True,
        )


def compile_times(size: str, layers: int, execution: dict) -> None:
    """CPU seconds to compile one update of the `size` model cut/grown to `layers` layers,
    with the layers unrolled and under one lax.scan (`scan_layers`)."""
    cfg = bench_config(size).replace(num_layers=layers)
    batch = make_batch(cfg, 4, 256, 64)
    print(f"# {size} model at {layers} layers, 4 x 256 tokens, execution {execution}")
    print("| layers | scan_layers | compile CPU s | wall s |")
    print("|---|---|---|---|")
    for scan in (False, True):
        model = with_execution(init_model(cfg, seed=0), **execution, scan_layers=scan)
        wall, cpu = _timed(lambda model=model: jax_step(model, batch))
        print(f"| {layers} | {scan} | {cpu:.1f} | {wall:.1f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["peak", "step", "scaling", "memory", "memory-one", "compile"])
    ap.add_argument("--layers", type=int, default=36, help="compile: model depth")
    ap.add_argument("--sizes", default="3m,30m,100m")
    ap.add_argument("--size", default="3m")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--lengths", default="")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no_torch", action="store_true")
    ap.add_argument("--execution", default="", help="ModelConfig execution options k=v,...")
    a = ap.parse_args()
    execution = parse_execution(a.execution)
    if a.mode == "memory-one":
        return memory_one(a.length, execution)
    print(f"# cores={cores()} jax={jax.__version__} backend={jax.default_backend()} "
          f"execution={execution} load average {os.getloadavg()}")  # fmt: skip
    if a.mode == "compile":
        return compile_times(a.size, a.layers, execution)
    if a.mode == "memory":
        return memory([int(x) for x in (a.lengths or "2048,4096,8192").split(",")], a.execution)
    p = matmul_peak()
    print(f"# f32 matmul peak (CPU time): jax {p['jax'] / 1e9:.1f} GFLOP/s, "
          f"torch {p['torch'] / 1e9:.1f} GFLOP/s")  # fmt: skip
    if a.mode == "peak":
        return
    peak = p["jax"]
    lengths = [int(x) for x in (a.lengths or str(a.length)).split(",")]
    if a.mode == "step":
        runs = [(s, a.rows, t) for s in a.sizes.split(",") for t in lengths]
    else:
        runs = [(a.size, a.rows, a.length * k) for k in (1, 2, 4)]
        runs += [(a.size, a.rows * k, a.length) for k in (2, 4)]
    print(
        "| model | rows x T | ours ms wall / CPU | torch ms wall / CPU | ours/torch speed "
        "wall / CPU | tok/s (CPU) | MFU (CPU) | loss ours / torch | XLA / model GFLOP "
        "| compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, rows, length in runs:
        r = run_pair(size, rows, length, a.prompt, a.repeats, not a.no_torch, execution)
        ms = lambda x: f"{x * 1e3:.0f}"  # noqa: E731
        print(
            f"| {size} | {rows} x {length} | {ms(r['wall_ours'])} / {ms(r['cpu_ours'])} "
            f"| {r['wall_theirs'] * 1e3:.0f} / {r['cpu_theirs'] * 1e3:.0f} "
            f"| {r['wall_theirs'] / r['wall_ours']:.2f}x / {r['cpu_theirs'] / r['cpu_ours']:.2f}x "
            f"| {rows * length / r['cpu_ours']:.0f} | {r['flops'] / r['cpu_ours'] / peak:.1%} "
            f"| {r['loss_ours']:.6f} / {r['loss_theirs']:.6f} "
            f"| {r['xla_flops'] / 1e9:.1f} / {r['flops'] / 1e9:.1f} | {r['compile_s']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
