"""One markdown table of per-seed numbers with mean ± sd and the paired s.e. over seeds.

The analyses outside the reproduction harness (the entrance analysis, the
multilingual matrix) report paired differences per seed (each seed's own
reference point); over n seeds the table gives mean ± sd and s.e. = sd / √n, the
numbers the verdict rule of docs/reproductions.md reads.
"""

from __future__ import annotations

import math

from rlvr_jax.repro.stats import Summary


def seed_table(names: list[str], rows: list[dict[str, float]], first: str = "run") -> str:
    """Rows `names` × the keys of `rows[0]`, then "mean ± sd" and "s.e." rows (3 decimals)."""
    keys = list(rows[0])
    lines = [f"| {first} | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, row in zip(names, rows, strict=True):
        lines.append(f"| {name} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")
    stats = [Summary.of([row[k] for row in rows]) for k in keys]
    lines.append("| mean ± sd | " + " | ".join(f"{s.mean:.3f} ± {s.sd:.3f}" for s in stats) + " |")
    lines.append("| s.e. | " + " | ".join(f"{s.sd / math.sqrt(s.n):.3f}" for s in stats) + " |")
    return "\n".join(lines)
