"""The multilingual train × eval matrix over seeds: transfer and the native advantage.

  python scripts/multilingual_seeds.py runs/ml_s0 runs/ml_s1 runs/ml_s2

Each argument is an `--out` of `scripts/multilingual_matrix.py` (its matrix.json),
one per training seed. Per seed, from the pass@1 cells (gains over the base row,
in points): the native gain (train and evaluate in the same language, mean over
the 4 languages), the transfer gain (train in one language, evaluate in another,
mean over the 12 pairs), native − transfer, and the lowest language consistency of
a trained model. Then mean ± sd over seeds and s.e. = sd / √n (the base row is
the same model in every seed, so the gains are paired with it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlvr_jax.analysis.seeds import seed_table


def _load(out: str) -> dict:
    path = Path(out) / "matrix.json"
    if not path.is_file():
        raise SystemExit(f"{path}: missing (run scripts/multilingual_matrix.py --out {out})")
    return json.loads(path.read_text())


def seed_row(m: dict) -> dict[str, float]:
    """Native gain, transfer gain (points), their difference, lowest consistency."""
    cells, langs = m["cells"], m["cols"]
    trained = [r for r in m["rows"] if r in langs]
    missing = [f"{r}->{c}" for r in ["base", *trained] for c in langs if f"{r}->{c}" not in cells]
    if missing:
        raise SystemExit(f"matrix incomplete: no cells {missing}")

    def gain(r, c):
        return 100 * (cells[f"{r}->{c}"]["pass@1"] - cells[f"base->{c}"]["pass@1"])

    native = [gain(r, r) for r in trained]
    transfer = [gain(r, c) for r in trained for c in langs if c != r]
    consistency = [cells[f"{r}->{c}"]["language_consistency"] for r in trained for c in langs]
    return {
        "native gain": float(np.mean(native)),
        "transfer gain": float(np.mean(transfer)),
        "native − transfer": float(np.mean(native) - np.mean(transfer)),
        "min consistency": float(min(consistency)),
    }


def table(outs: list[str]) -> str:
    rows = [seed_row(_load(o)) for o in outs]
    return seed_table([Path(o).name for o in outs], rows, first="seed run")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("outs", nargs="+")
    print(table(p.parse_args().outs))


if __name__ == "__main__":
    main()
