"""The report papers print: markdown tables (models x benchmarks), JSON, a pass@k plot.

One table per metric, rows the models and columns the benchmarks then "Avg.",
cells "value ± standard error" in percent, as the seed papers lay out their
result tables; the settings follow the tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _metric_names(full: dict[str, Any]) -> list[str]:
    """Metrics every benchmark of every model has, in the order avg, pass, maj, tests."""
    names = None
    for m in full["models"]:
        for b in m["result"]["benchmarks"].values():
            names = set(b["metrics"]) if names is None else names & set(b["metrics"])
    order = {"avg": 0, "pass": 1, "maj": 2}

    def key(name: str):
        head, _, k = name.partition("@")
        return (order.get(head, 3), int(k) if k.isdigit() else 0, name)

    return sorted(names or (), key=key)


def _cell(est: dict[str, float]) -> str:
    return f"{100 * est['value']:.1f} ± {100 * est['se']:.1f}"


def markdown(full: dict[str, Any]) -> str:
    """The tables of a report from `evaluate_models` (models x benchmarks + Avg., in %)."""
    models = full["models"]
    benches = list(models[0]["result"]["benchmarks"])
    titles = [models[0]["result"]["benchmarks"][b]["title"] for b in benches]
    lines = []
    for name in _metric_names(full):
        label = "test pass rate" if name == "test_pass_rate" else name
        lines += [f"**{label}** (%, ± standard error over problems)", ""]
        lines.append("| Model | " + " | ".join(titles) + " | Avg. |")
        lines.append("|---|" + "---|" * (len(benches) + 1))
        for m in models:
            res = m["result"]
            cells = [_cell(res["benchmarks"][b]["metrics"][name]) for b in benches]
            avg = res["average"].get(name)
            cells.append(_cell(avg) if avg else "–")
            lines.append(f"| {m['label']} | " + " | ".join(cells) + " |")
        lines.append("")
    s = full["settings"]
    first = models[0]["result"]["benchmarks"]
    sizes = ", ".join(f"{first[b]['title']} {first[b]['num_problems']}" for b in benches)
    lines.append(
        f"suite {full['suite']}: n = {s['n_samples']} samples per problem, temperature "
        f"{s['temperature']}, top-p {s['top_p']}, max {s['max_new_tokens']} new tokens, "
        f"seed {s['seed']}; problems: {sizes}"
    )
    missing = models[0]["result"]["missing"]
    if missing:
        lines.append(f"not in the data directory (left out): {', '.join(missing)}")
    return "\n".join(lines) + "\n"


def plot_pass_at_k(full: dict[str, Any], path: Path) -> None:
    """A PNG with one panel per benchmark: mean pass@k against k (log2 axis), a line per model."""
    import matplotlib  # lazy: only when a report is written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = full["models"]
    benches = list(models[0]["result"]["benchmarks"])
    cols = min(len(benches), 3)
    rows = -(-len(benches) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, b in zip(axes.ravel(), benches, strict=False):
        for m in models:
            curve = m["result"]["benchmarks"][b]["pass_curve"]
            ks = list(range(1, len(curve) + 1))
            ax.plot(ks, [100 * v for v in curve], marker="o", ms=3, label=m["label"])
        ax.set_xscale("log", base=2)
        ax.set_title(models[0]["result"]["benchmarks"][b]["title"])
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(benches) :]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(full: dict[str, Any], out: Path) -> None:
    """Writes results.json, table.md and pass_at_k.png into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(full, indent=2))
    (out / "table.md").write_text(full["table"])
    plot_pass_at_k(full, out / "pass_at_k.png")
