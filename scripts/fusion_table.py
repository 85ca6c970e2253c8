"""Writes the multi-domain evaluation table of a pipeline workdir (the fusion table).

  python scripts/fusion_table.py runs/fusion [--out runs/fusion/fusion_table.md]
      [--tasks '{"countdown": {"name": "countdown", "options": {...}}, ...}']
      [--num-problems 128] [--n-samples 8]

Rows: the base and every finished stage of the pipeline (for experiments/fusion:
θ_0, each specialist, each merge, Mix RL, MOPD); columns: held-out pass@1 and
pass@n on each eval task (default: the pipeline's `config.eval`). Evaluations the
pipeline cached in <workdir>/eval/ are reused; missing ones are run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr_jax.pipeline.run import evaluation_table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workdir")
    p.add_argument("--out", default="", help="default: <workdir>/fusion_table.md")
    p.add_argument("--tasks", default="", help="eval tasks JSON (default: the pipeline's)")
    p.add_argument("--num-problems", type=int, default=0)
    p.add_argument("--n-samples", type=int, default=0)
    args = p.parse_args()
    table = evaluation_table(
        args.workdir, tasks=args.tasks, num_problems=args.num_problems, n_samples=args.n_samples
    )
    out = Path(args.out or Path(args.workdir) / "fusion_table.md")
    out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
