"""Audits every rollout scheduler on the simulated population (mean ± sd over seeds).

  taskset -c 1 python scripts/bench_schedulers.py [--seeds 5] [--steps 30] [--drift 0.0]

Prints a markdown table: effective groups per 1,000 rollouts, tokens per
effective group, rollouts to fill a batch of B effective groups, tokens
relative to full groups, and PAIR's estimator bias against the complete-pair
target. See rlvr_jax/scheduling/bench.py.
"""

import argparse
import sys

from rlvr_jax.scheduling import bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--drift", type=float, default=0.0)
    args = ap.parse_args()
    cfg = bench.BenchConfig(
        seeds=args.seeds, steps=args.steps, num_prompts=args.prompts, drift=args.drift
    )
    results = bench.run(cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(bench.table(results, cfg))


if __name__ == "__main__":
    main()
