"""The paged engine's decode step against its matmul floor (issue 32's goal: within 1.5x).

  taskset -c 0 python scripts/bench_decode_floor.py --sizes 3m,30m --slots 32,64

For each model size and slot count S: S rows with P-token prompts are admitted into an
`Engine` (prefilled), then `Engine.step()` is timed, one decode step over S full slots
(host bookkeeping, the decode program, its one host sync), CPU time per step, median of
`--steps`. Beside it: the step's sampling alone (`engine_step.sample_rows` on [S, V]
logits) and the floor, `bench_sampler.decode_matmuls`: one decode step's dense matmuls
alone at S rows in our layout (fused q/k/v and gate/up, every layer, the output
projection), the cost no decode step can go under. Random weights; CPU time, one core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from rlvr_jax.models import init_model
from rlvr_jax.models.tiny import bench_config
from rlvr_jax.sampling import engine_step
from rlvr_jax.sampling.engine import Engine, Request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sampler import decode_matmuls  # noqa: E402


def _median_cpu(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def sampling_seconds(cfg, slots: int, repeats: int) -> float:
    """Median CPU seconds of the decode step's sampling alone (`sample_rows` on [S, V]
    logits, top-k/top-p off: under vmap its sort runs anyway)."""
    logits = jax.random.normal(jax.random.key(1), (slots, cfg.vocab_size))
    keys = jax.random.split(jax.random.key(2), slots)
    ones, zeros = jnp.ones((slots,)), jnp.zeros((slots,), jnp.int32)
    sample = jax.jit(engine_step.sample_rows)
    return _median_cpu(
        lambda: jax.block_until_ready(sample(keys, logits, ones, zeros, ones)), repeats
    )


def step_seconds(cfg, slots: int, prompt: int, steps: int, page_size: int) -> float:
    """Median CPU seconds of one `Engine.step()` with `slots` rows decoding."""
    model = init_model(cfg, seed=0)
    new = steps + 8  # no row ends while it is timed
    engine = Engine(
        model, num_pages=slots * -(-(prompt + new) // page_size), page_size=page_size,
        slots=slots, max_length=prompt + new, prefill_chunk=64,
    )  # fmt: skip
    reqs = [
        Request(r, tuple((7 * r + 3 * t) % (cfg.vocab_size - 1) + 1 for t in range(prompt)),
                r, new, temperature=1.0)
        for r in range(slots)
    ]  # fmt: skip
    engine.start(jax.random.key(0))
    engine.submit(reqs)
    for _ in range(3):  # admission and prefill, then the decode program's compile
        engine.step()
    times = []
    for _ in range(steps):
        t = time.process_time()
        done = engine.step()
        times.append(time.process_time() - t)
        assert not done
    st = engine.stats
    assert st.active_slot_steps == slots * st.decode_steps  # every slot decoded every step
    engine.close()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3m,30m")
    ap.add_argument("--slots", default="32,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--page-size", type=int, default=16)
    args = ap.parse_args()
    print("| model | slots S | context | engine step CPU ms | its sampling alone "
          "| matmul floor | step / floor |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        cfg = bench_config(size)
        for s in (int(x) for x in args.slots.split(",")):
            step = step_seconds(cfg, s, args.prompt, args.steps, args.page_size)
            sampling = sampling_seconds(cfg, s, args.steps)
            floor = decode_matmuls(cfg, s)[0]
            ctx = f"{args.prompt}-{args.prompt + args.steps + 3}"
            ms = " | ".join(f"{1e3 * x:.2f}" for x in (step, sampling, floor))
            print(f"| {size} | {s} | {ctx} | {ms} | {step / floor:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
