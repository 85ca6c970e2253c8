"""The "Locked at the Entrance" analyses of an RL run on Countdown, for any two checkpoints.

Usage:
  python scripts/analyze_entrance.py runs/ebl                 # early = the run's initial policy
  python scripts/analyze_entrance.py runs/ebl step:4          # early = the run's checkpoint 4
  python scripts/analyze_entrance.py runs/ebl runs/other_run  # early = another model / run export
  options: --out DIR (default <run_dir>/entrance) --num-problems 64 --n-samples 16
           --layers=-2: --alphas 0,0.25,0.5,0.75,1 --seed 0

Writes entrance.json, entrance.md, likelihood_shift.png and interpolation.png
(rlvr_jax/analysis/entrance.py: coverage and entrance entropy of base vs RL, the
per-token likelihood shift around the first operation, the entrance-prefix
intervention, and the late-layer interpolation sweep).
"""

from __future__ import annotations

import argparse
import logging

from rlvr_jax.analysis.entrance import EntranceOptions, analyze_entrance


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("early_ckpt", nargs="?", default="")
    p.add_argument("--out", default=None)
    p.add_argument("--num-problems", type=int, default=EntranceOptions.num_problems)
    p.add_argument("--n-samples", type=int, default=EntranceOptions.n_samples)
    p.add_argument("--layers", default=EntranceOptions.layers)
    p.add_argument("--alphas", default=",".join(map(str, EntranceOptions.alphas)))
    p.add_argument("--seed", type=int, default=EntranceOptions.seed)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    options = EntranceOptions(
        num_problems=a.num_problems,
        n_samples=a.n_samples,
        layers=a.layers,
        alphas=tuple(float(x) for x in a.alphas.split(",")),
        seed=a.seed,
    )
    result = analyze_entrance(a.run_dir, a.early_ckpt, a.out, options)
    print(open(f"{a.out or a.run_dir + '/entrance'}/entrance.md").read())
    print(f"({result['seconds']} s)")


if __name__ == "__main__":
    main()
