"""First run on an accelerator: rollout engines and 3 GRPO steps of a ~0.6B Qwen3, in minutes.

  python scripts/accelerator_check.py                 # qwen3-0.6b (random weights, bf16)
  python scripts/accelerator_check.py --size tiny     # the same checks in seconds (CPU test)
  python scripts/accelerator_check.py --out check.json

On whatever device JAX sees (GPU, TPU or CPU) it runs
  1. the rollout benchmark of scripts/bench_rollout.py (long-tailed response lengths,
     one prompt per group shared by G = 8 samples) through the paged engine and the
     static sampler, one warm-up and one timed call each: generated tokens/s, wall
     seconds, and the decode MFU (2 x parameters x generated tokens / wall / peak);
  2. three GRPO steps of the Countdown task on the same architecture
     (`model.source = random`, `model.random_size = <size>`, bf16, rollouts through
     the paged engine): the steady step time (steps 2-3), the update's MFU (6 x
     parameters x trained tokens / update seconds / peak);
and prints the device, its peak bf16 FLOP/s (the vendor figure for known chips, else
a measured matmul), and peak device memory (`memory_stats()`; the process's
resident memory on CPU). Budget on an H100: well under 8 minutes, most of it
compilation.

Needs on the machine: jax, flax, optax, orbax-checkpoint (preinstalled on the
device image) and this package's other install requirements (ml-collections,
sentencepiece, grain, tensorboardX, absl-py, numpy: `pip install -e . --no-deps`
plus those wheels); torch and transformers are not needed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_rollout
from bench_rollout import make_workload, paged_runner, static_runner, timed  # noqa: E402

from rlvr_jax.models.transformer import init_model  # noqa: E402
from rlvr_jax.rl.build import random_model_config  # noqa: E402
from rlvr_jax.train import warmstart  # noqa: E402

# Dense bf16 peak FLOP/s per chip (vendor figures), matched by substring of device_kind.
PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "TPU v6": 918e12,
    "TPU v5p": 459e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v4": 275e12,
}
# Workload per size: (prompts, prompt min, prompt max, median response, GRPO prompts/step,
# GRPO max new tokens, decode slots).
SIZES = {
    "qwen3-0.6b": (16, 64, 512, 64, 16, 256, 64),
    "tiny": (2, 8, 16, 4, 2, 8, 4),
}


def measured_peak(dtype=jnp.bfloat16, n=4096, repeats=5) -> float:
    """Best FLOP/s of a jitted n x n matmul on the default device."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def peak_memory_bytes() -> tuple[float, str]:
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return float(stats["peak_bytes_in_use"]), "device peak_bytes_in_use"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0, "process max RSS"


def rollout_check(cfg, size: str, peak: float) -> dict:
    prompts, pmin, pmax, median, _, _, slots = SIZES[size]
    w = make_workload(cfg.vocab_size, prompts, 8, pmin, pmax, median, "longtail")
    model = init_model(cfg, seed=0)
    out = {"rows": w.rows, "tokens": int(w.lengths.sum()), "longest": w.longest}
    for name, runner in (
        ("paged", paged_runner(model, w, slots, 16, 128)),
        ("static", static_runner(model, w)),
    ):
        warm = timed(runner, 0, warm=True)[0]
        wall, cpu, extra = timed(runner, 1)
        out[name] = dict(
            warmup_s=warm,
            wall_s=wall,
            tokens_per_s=out["tokens"] / wall,
            decode_mfu=2 * cfg.num_params() * out["tokens"] / wall / peak,
            wasted_token_steps=extra["waste"],
        )
        print(f"  rollout {name}: {out['tokens'] / wall:.0f} tokens/s ({wall:.1f} s)", flush=True)
    out["paged_over_static"] = out["static"]["wall_s"] / out["paged"]["wall_s"]
    return out


def grpo_check(size: str, peak: float, params: float) -> dict:
    from rlvr_jax.repro.runs import load_config
    from rlvr_jax.rl.trainer import train

    _, _, _, _, prompts, new_tokens, slots = SIZES[size]
    c = load_config("baselines/grpo.py")  # experiments/baselines/grpo.py
    c.model.source, c.model.random_size = "random", size
    c.model.param_dtype = c.model.dtype = "bfloat16"
    c.rollout.engine, c.rollout.decode_slots = "paged", slots
    c.rollout.max_new_tokens = new_tokens
    c.data.prompts_per_step = prompts
    c.train.steps = 3
    c.eval.at_start, c.eval.every, c.eval.num_problems = False, 0, 8
    c.checkpoint.every, c.checkpoint.export_final = 3, False
    with tempfile.TemporaryDirectory() as d:
        train(c, d)
        rows = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
    steps = [r for r in rows if r.get("split") == "train"]
    steady = steps[1:] or steps
    mean = lambda k: float(np.mean([r[k] for r in steady]))  # noqa: E731
    # Trained tokens per step: every row's response; prompts (~40 Countdown tokens) included.
    trained = prompts * c.data.group_size * (mean("response_len") + 40)
    return dict(
        step_s=mean("step_seconds"),
        rollout_s=mean("rollout_seconds"),
        update_s=mean("update_seconds"),
        first_step_s=steps[0]["step_seconds"],
        update_mfu=6 * params * trained / mean("update_seconds") / peak,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="qwen3-0.6b", choices=list(SIZES))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    start = time.perf_counter()
    dev = jax.devices()[0]
    kind = dev.device_kind
    vendor = next((v for k, v in PEAK_BF16.items() if k in kind), None)
    measured = measured_peak(n=4096 if dev.platform != "cpu" else 512)
    peak = vendor or measured
    print(f"device: {len(jax.devices())} x {kind} ({dev.platform}), jax {jax.__version__}; "
          f"peak bf16 {peak / 1e12:.1f} TFLOP/s ({'vendor' if vendor else 'measured'}; "
          f"measured matmul {measured / 1e12:.1f})", flush=True)  # fmt: skip
    m = dict(random_size=args.size, param_dtype="bfloat16", dtype="bfloat16")
    import ml_collections

    cfg = random_model_config(ml_collections.ConfigDict(m), warmstart.default_tokenizer())
    report = dict(device=kind, platform=dev.platform, peak_flops=peak, size=args.size,
                  params=cfg.num_params())  # fmt: skip
    report["rollout"] = rollout_check(cfg, args.size, peak)
    report["grpo"] = grpo_check(args.size, peak, cfg.num_params())
    report["peak_memory_bytes"], report["memory_source"] = peak_memory_bytes()
    report["wall_s"] = time.perf_counter() - start
    r, g = report["rollout"], report["grpo"]
    print(
        f"\nqwen3 {args.size} ({cfg.num_params() / 1e6:.0f}M, bf16) on {kind}:\n"
        f"  rollout ({r['rows']} rows, {r['tokens']} tokens, longest {r['longest']}): paged "
        f"{r['paged']['tokens_per_s']:.0f} tok/s (decode MFU {100 * r['paged']['decode_mfu']:.1f}%)"
        f", static {r['static']['tokens_per_s']:.0f} tok/s: paged {r['paged_over_static']:.2f}x\n"
        f"  GRPO step {g['step_s']:.2f} s (rollout {g['rollout_s']:.2f}, update "
        f"{g['update_s']:.2f}; first step {g['first_step_s']:.1f} s), update MFU "
        f"{100 * g['update_mfu']:.1f}%\n"
        f"  peak memory {report['peak_memory_bytes'] / 2**30:.2f} GiB ({report['memory_source']})"
        f"; total {report['wall_s']:.0f} s"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
