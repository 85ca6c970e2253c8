"""Runs baseline experiment configs over seeds and prints the before/after comparison table.

  python scripts/run_baselines.py --variant countdown --seeds 0,1,2 --root runs/baselines

Each run is `python -m rlvr_jax.main --config=experiments/baselines/<name>.py:<variant>
--workdir=<root>/<name>-<variant>/s<seed> --config.seed=<seed>`; finished runs are
reused (re-running resumes), so the table can be rebuilt without training again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from rlvr_jax.run.report import comparison_table

ROOT = Path(__file__).resolve().parents[1]
ALL = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=",".join(ALL), help="comma-separated baseline names")
    p.add_argument("--variant", default="countdown")
    p.add_argument("--seeds", default="0")
    p.add_argument("--root", default="runs/baselines")
    p.add_argument("--skip-train", action="store_true", help="only build the table")
    args = p.parse_args()
    runs = {}
    for name in args.configs.split(","):
        dirs = []
        for seed in args.seeds.split(","):
            workdir = Path(args.root) / f"{name}-{args.variant}" / f"s{seed}"
            if not args.skip_train and not (workdir / "results.md").is_file():
                cmd = [
                    sys.executable,
                    "-m",
                    "rlvr_jax.main",
                    f"--config=experiments/baselines/{name}.py:{args.variant}",
                    f"--workdir={workdir.resolve()}",
                    f"--config.seed={seed}",
                ]
                print(" ".join(cmd), flush=True)
                subprocess.run(cmd, cwd=ROOT, check=True)
            dirs.append(workdir)
        runs[name] = dirs
    print(comparison_table(runs))


if __name__ == "__main__":
    main()
