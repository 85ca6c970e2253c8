"""The entrance analysis over seeds: one row per RL run, mean ± sd, paired differences.

  python scripts/entrance_seeds.py runs/ebl_s0 runs/ebl_s1 runs/ebl_s2

Each argument is an RL run analysed by `scripts/analyze_entrance.py` (its
`<run>/entrance/entrance.json`). Prints markdown: per seed, RL's pass@1 and
coverage, the likelihood-shift ratio, the low-access natural and forced
completion, and for every interpolation α the change in coverage (relative to
α = 0) and in pass@1 (points); then mean ± sd over seeds and the paired
s.e. = sd / √n. The paper's claim (coverage up at no pass@1 loss) is judged by the
rule of docs/reproductions.md: a rise is resolved when the mean exceeds 2 s.e.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np


def _load(run: str) -> dict:
    path = Path(run) / "entrance" / "entrance.json"
    if not path.is_file():
        raise SystemExit(f"{path}: missing (run scripts/analyze_entrance.py {run} first)")
    return json.loads(path.read_text())


def seed_row(d: dict) -> dict[str, float]:
    """The numbers of one analysed run (fractions; Δ pass@1 in points, Δ coverage in %)."""
    sweep = {s["alpha"]: s for s in d["interpolation"]["sweep"]}
    base = sweep[0.0]
    low = d["intervention"]["rl"]["summary"]["low_access"]
    row = {
        "pass@1": d["eval"]["rl"]["pass@1"],
        "coverage": d["eval"]["rl"]["coverage"],
        "shift ratio": d["likelihood_shift"]["ratio"],
        "low natural": low["natural_completion"],
        "low forced": low["forced_completion"],
    }
    for alpha, s in sorted(sweep.items()):
        if alpha:
            row[f"Δcov% α={alpha:g}"] = 100 * (s["coverage"] / base["coverage"] - 1)
            row[f"Δpass@1 α={alpha:g}"] = 100 * (s["pass@1"] - base["pass@1"])
    return row


def mean_sd_se(values: list[float]) -> tuple[float, float, float]:
    v = np.asarray(values, np.float64)
    sd = float(v.std(ddof=1)) if v.size > 1 else math.nan
    return float(v.mean()), sd, sd / math.sqrt(v.size)


def table(runs: list[str]) -> str:
    rows = [seed_row(_load(r)) for r in runs]
    keys = list(rows[0])
    out = ["| run | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for run, row in zip(runs, rows, strict=True):
        out.append(f"| {Path(run).name} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")
    stats = [mean_sd_se([row[k] for row in rows]) for k in keys]
    out.append("| mean ± sd | " + " | ".join(f"{m:.3f} ± {sd:.3f}" for m, sd, _ in stats) + " |")
    out.append("| s.e. | " + " | ".join(f"{se:.3f}" for _, _, se in stats) + " |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+")
    print(table(p.parse_args().runs))


if __name__ == "__main__":
    main()
