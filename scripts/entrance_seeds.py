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
from pathlib import Path

from rlvr_jax.analysis.seeds import seed_table


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


def table(runs: list[str]) -> str:
    return seed_table([Path(r).name for r in runs], [seed_row(_load(r)) for r in runs])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+")
    print(table(p.parse_args().runs))


if __name__ == "__main__":
    main()
