"""Train-step throughput: tokens/s and model FLOP utilisation of the GRPO update, vs PyTorch.

Usage (pin to one core so that both frameworks get the same compute and
other processes do not steal it; every number then is per core):
  taskset -c 1 python scripts/bench_train.py peak                    # matmul FLOP/s
  taskset -c 1 python scripts/bench_train.py step --sizes 3m,30m,100m
  taskset -c 1 python scripts/bench_train.py scaling --size 30m

peak: the best f32 FLOP/s of a jitted square matmul (n = 1024, 2048, 3072),
  the ceiling MFU is measured against (torch's matmul printed alongside).
step: one optimizer update of the PPO-clip GRPO loss (rlvr_jax.rl.update.make_update:
  forward, backward, global-norm clip, AdamW) on `--rows` x `--length` tokens, for
  each bench model (rlvr_jax.testing.bench_config), against the same step
  written in PyTorch on the same weights and batch: the transformers
  Qwen3ForCausalLM (its default attention), the same log-prob gather, clipped
  surrogate, sequence-mean-token-mean aggregation, clip_grad_norm_ and
  torch.optim.AdamW. The first-step losses of the two are printed to show it is
  one computation. Model FLOPs per step = tokens x (6 N + 12 L d_attn T), N the
  parameters used in matmuls (embedding lookup excluded, output projection
  included), the PaLM accounting; XLA's own count of the compiled step is
  printed too.
scaling: step time as the sequence length and the rows (group size x prompts) double.
Timing: compile + 2 warm-up steps, then `--repeats` steps alternating the two
frameworks; medians.
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
from flax import nnx

from rlvr_jax.models.checkpoint import load_pretrained
from rlvr_jax.rl import objectives
from rlvr_jax.rl.update import RLState, build_optimizer, make_update
from rlvr_jax.testing import bench_config

EPS = 0.2
LR = 1e-5


def cores() -> int:
    return len(os.sched_getaffinity(0))


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# --------------------------------------------------------------------------- peak


def matmul_peak(sizes=(1024, 2048, 3072), repeats: int = 5) -> dict[str, float]:
    """Best f32 matmul FLOP/s of jax (and torch) on this process's cores."""
    import torch

    torch.set_num_threads(cores())
    out = {"jax": 0.0, "torch": 0.0}
    for n in sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
        f = jax.jit(lambda x: x @ x)
        jax.block_until_ready(f(a))
        t = _median_time(lambda f=f, a=a: jax.block_until_ready(f(a)), repeats)
        out["jax"] = max(out["jax"], 2 * n**3 / t)
        ta = torch.randn(n, n)
        ta @ ta
        t = _median_time(lambda ta=ta: ta @ ta, repeats)
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


def jax_step(path: str, batch):
    """(step_fn returning the loss, XLA flops of the compiled step) for our update."""
    model, _ = load_pretrained(path)
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
    try:
        cost = update.lower(state, rest, None, mb).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops = float(cost.get("flops", float("nan")))
    except (AttributeError, KeyError, TypeError):  # best effort; the timing does not need it
        flops = float("nan")
    holder = {"state": state}

    def step():
        holder["state"], metrics = update(holder["state"], rest, None, mb)
        return float(metrics["loss"])

    return step, flops


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


def run_pair(size: str, rows: int, length: int, prompt: int, repeats: int, torch_too: bool):
    """Times our step (and torch's) for one model and batch; returns a result dict."""
    cfg = bench_config(size)
    batch = make_batch(cfg, rows, length, prompt)
    with tempfile.TemporaryDirectory() as d:
        hf_model = save_hf(cfg, d)
        ours, xla_flops = jax_step(d, batch)
    loss_ours = ours()  # compile + first step (initial weights)
    theirs = torch_step(hf_model, batch) if torch_too else None
    loss_theirs = theirs() if theirs else float("nan")
    for _ in range(2):
        ours()
        if theirs:
            theirs()
    t_ours, t_theirs = [], []
    for _ in range(repeats):
        t_ours.append(_median_time(ours, 1))
        if theirs:
            t_theirs.append(_median_time(theirs, 1))
    res = dict(
        size=size,
        params_m=cfg.num_params() / 1e6,
        rows=rows,
        length=length,
        flops=model_flops(cfg, rows, length),
        xla_flops=xla_flops,
        t_ours=statistics.median(t_ours),
        t_theirs=statistics.median(t_theirs) if theirs else float("nan"),
        loss_ours=loss_ours,
        loss_theirs=loss_theirs,
    )
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["peak", "step", "scaling"])
    ap.add_argument("--sizes", default="3m,30m,100m")
    ap.add_argument("--size", default="30m")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no_torch", action="store_true")
    a = ap.parse_args()
    print(f"# cores={cores()} jax={jax.__version__} backend={jax.default_backend()}")
    if a.mode == "peak":
        p = matmul_peak()
        print(f"peak f32 matmul: jax {p['jax'] / 1e9:.1f} GFLOP/s | torch {p['torch'] / 1e9:.1f}")
        return
    peak = matmul_peak()["jax"]
    print(f"# measured jax f32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    if a.mode == "step":
        runs = [(s, a.rows, a.length) for s in a.sizes.split(",")]
    else:
        runs = [(a.size, a.rows, a.length * k) for k in (1, 2, 4)]
        runs += [(a.size, a.rows * k, a.length) for k in (2, 4)]
    print(
        "| model | params | rows x T | ours ms | tok/s | MFU | torch ms | ours/torch speed "
        "| loss ours / torch | XLA GFLOP / model GFLOP |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, rows, length in runs:
        r = run_pair(size, rows, length, a.prompt, a.repeats, not a.no_torch)
        tok = rows * length
        print(
            f"| {size} | {r['params_m']:.1f}M | {rows} x {length} | {r['t_ours'] * 1e3:.0f} "
            f"| {tok / r['t_ours']:.0f} | {r['flops'] / r['t_ours'] / peak:.1%} "
            f"| {r['t_theirs'] * 1e3:.0f} | {r['t_theirs'] / r['t_ours']:.2f}x "
            f"| {r['loss_ours']:.6f} / {r['loss_theirs']:.6f} "
            f"| {r['xla_flops'] / 1e9:.1f} / {r['flops'] / 1e9:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
