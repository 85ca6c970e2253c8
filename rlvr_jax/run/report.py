"""The run report: a markdown results table and a PNG of the training curves.

Both are built from the run's `metrics.jsonl` (written by
`rlvr_jax.run.logger.MetricsLogger`): the "eval" records give the table
(held-out pass@k before and after RL), all records give the curves.

  results_md, curves_png = write_report(workdir)
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_jax.run.metrics_file import METRICS_FILE, read_metrics

log = logging.getLogger(__name__)

RESULTS_FILE = "results.md"
CURVES_FILE = "curves.png"


def _at_keys(records: list[dict], prefix: str) -> list[str]:
    """The f"{prefix}@{k}" keys present in any record, by increasing k."""
    pattern = re.compile(rf"^{prefix}@(\d+)$")
    ks = {int(m.group(1)) for r in records for key in r if (m := pattern.match(key))}
    return [f"{prefix}@{k}" for k in sorted(ks)]


def _eval_rows(records: list[dict]) -> list[dict]:
    """The eval records by step; a step evaluated twice keeps its last record."""
    by_step = {r["step"]: r for r in records if r.get("split") == "eval"}
    return [by_step[s] for s in sorted(by_step)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def results_table(records: list[dict]) -> str:
    """A markdown table of the eval records, then the pass@k change from first to last.

    pass@k and avg@k are shown in percent. The first row is labelled "before RL"
    when it is step 0, the last "after".

    Args:
      records: metrics records (see `read_metrics`); only split == "eval" is used.
    Returns:
      The markdown text; "(no eval records)" when there are none.
    """
    rows = _eval_rows(records)
    if not rows:
        return "(no eval records)\n"
    pass_keys = _at_keys(rows, "pass")
    avg_keys = _at_keys(rows, "avg")
    columns = (
        [(k, f"{k} (%)", "{:.1f}", 100.0) for k in pass_keys + avg_keys]
        + [("mean_reward", "mean reward", "{:.3f}", 1.0)]
        + [("mean_response_tokens", "response tokens", "{:.1f}", 1.0)]
    )
    header = ["step"] + [title for _, title, _, _ in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        label = str(row["step"])
        if i == 0 and row["step"] == 0:
            label += " (before RL)"
        elif i == len(rows) - 1 and len(rows) > 1:
            label += " (after)"
        cells = [label]
        for key, _, fmt, scale in columns:
            value = row.get(key)
            cells.append(fmt.format(value * scale) if _is_number(value) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        for key in pass_keys:
            a, b = first.get(key), last.get(key)
            if _is_number(a) and _is_number(b):
                a, b = 100.0 * a, 100.0 * b
                text += f"\n{key}: before {a:.1f}% → after {b:.1f}% ({b - a:+.1f} points)"
        text += "\n"
    return text


def _series(records: list[dict], split: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric; eval records deduplicated as in the table."""
    steps, values = [], []
    for r in _eval_rows(records) if split == "eval" else records:
        v = r.get(key)
        if r.get("split") == split and _is_number(v):
            steps.append(r["step"])
            values.append(float(v))
    return steps, values


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average that skips non-finite values."""
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - window + 1) : i + 1] if math.isfinite(v)]
        out.append(sum(chunk) / len(chunk) if chunk else math.nan)
    return out


def _train_keys(records: list[dict], prefixes, skip=()) -> list[tuple[str, str, str]]:
    """("train", key, key) for the train keys starting with a prefix (not ending in `skip`)."""
    keys = {k for r in records if r.get("split") == "train" for k in r}
    keys = [k for k in keys if k.startswith(tuple(prefixes)) and not k.endswith(tuple(skip))]
    return [("train", k, k) for k in sorted(keys)]


def _panels(records: list[dict]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(title, [(split, key, label)]) for each panel that has at least one series."""
    # avg@k is not plotted: its mean over problems equals pass@1's.
    eval_keys = _at_keys(_eval_rows(records), "pass")
    wanted = [
        ("train reward", [("train", "reward", "reward"), ("train", "pass_rate", "pass rate")]),
        ("held-out pass@k", [("eval", k, k) for k in eval_keys]),
        ("KL to reference", [("train", "kl", "kl")]),
        ("entropy", [("train", "entropy", "entropy")]),
        (
            "response length (tokens)",
            [("train", "response_len", "train"), ("eval", "mean_response_tokens", "eval")],
        ),
        # The methods' defining quantities: the rollout plug-in's rows (guided, noisy,
        # rescued, turns), the off-context importance weights, GAPO's clip rates by success.
        ("rollout stage", _train_keys(records, ("rollout/",), ("_groups",))),
        ("importance weights", _train_keys(records, ("is_weight", "is_truncated"))),
        ("clip rate by group success", _train_keys(records, ("clip_high_frac@", "clip_low_frac@"))),
    ]
    panels = []
    for title, series in wanted:
        present = [s for s in series if _series(records, s[0], s[1])[0]]
        if present:
            panels.append((title, present))
    return panels


def plot_curves(records: list[dict], path) -> None:
    """Saves a PNG with one panel per available curve group.

    Panels: train reward (+ pass_rate), eval pass@k over steps, KL,
    entropy, response length (train and eval). Series missing from `records` are
    skipped; with none at all the figure says so.

    Args:
      records: metrics records (see `read_metrics`).
      path: the PNG file to write.
    """
    import matplotlib  # Lazy: heavy, and only needed for the report.

    matplotlib.use("Agg")  # no display on servers; must precede pyplot's import
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    panels = _panels(records)
    ncols = min(3, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.5 * nrows), squeeze=False)
    flat = axes.ravel()
    if not panels:
        flat[0].text(0.5, 0.5, "no metrics to plot", ha="center", va="center")
        flat[0].set_axis_off()
    for ax, (title, series) in zip(flat, panels, strict=False):
        for split, key, label in series:
            steps, values = _series(records, split, key)
            if split == "eval" or len(values) < 20:
                ax.plot(steps, values, marker="o" if split == "eval" else None, label=label)
            else:  # noisy per-step curves: faint raw values under a moving average
                (line,) = ax.plot(steps, values, alpha=0.3)
                window = max(2, len(values) // 20)
                ax.plot(steps, _smooth(values, window), color=line.get_color(), label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize="small")
    for ax in flat[len(panels) :]:
        if panels:
            ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def write_report(workdir) -> tuple[Path, Path]:
    """Writes `workdir/results.md` and `workdir/curves.png` from `workdir/metrics.jsonl`.

    Args:
      workdir: the run directory.
    Returns:
      (results.md path, curves.png path).
    """
    workdir = Path(workdir)
    metrics = workdir / METRICS_FILE
    if not metrics.is_file():
        raise FileNotFoundError(f"no {METRICS_FILE} in {workdir}; is it a run directory?")
    records = read_metrics(metrics)
    results, curves = workdir / RESULTS_FILE, workdir / CURVES_FILE
    text = f"# Results: {workdir.name}\n\n{results_table(records)}"
    _write_atomic(results, lambda p: p.write_text(text, encoding="utf-8"))
    _write_atomic(curves, lambda p: plot_curves(records, p))
    return results, curves


def _final_and_initial(workdir) -> tuple[dict, dict, float]:
    records = read_metrics(Path(workdir) / METRICS_FILE)
    rows = _eval_rows(records)
    if len(rows) < 2:
        raise ValueError(f"{workdir}: needs an eval before and after training, found {len(rows)}")
    train = [r for r in records if r.get("split") == "train"]
    seconds = sum(float(r.get("step_seconds", 0.0)) for r in train)
    return rows[0], rows[-1], seconds


def comparison_table(runs: dict[str, list]) -> str:
    """One row per method: held-out pass@k before → after RL, mean and spread over seeds.

    Args:
      runs: method name -> workdirs of its seeds (each with a metrics.jsonl holding
        an eval at the start and at the end).
    Returns:
      Markdown: per method the mean pass@1 and pass@n before and after, the mean
      gain in points with its min..max over seeds, and the mean RL-step seconds
      (sampling + updates, evaluations excluded).
    """
    lines = []
    for name, workdirs in runs.items():
        results = [_final_and_initial(w) for w in workdirs]
        keys = _at_keys([results[0][0]], "pass")
        if not lines:
            head = ["method", "seeds"]
            for k in keys:
                head += [f"{k} before", f"{k} after", f"Δ{k} (min..max)"]
            lines = [
                "| " + " | ".join(head + ["RL seconds"]) + " |",
                "|" + "---|" * (len(head) + 1),
            ]
        cells = [name, str(len(results))]
        for k in keys:
            before = np.array([100 * r[0][k] for r in results])
            after = np.array([100 * r[1][k] for r in results])
            gain = after - before
            cells += [
                f"{before.mean():.1f}",
                f"{after.mean():.1f}",
                f"{gain.mean():+.1f} ({gain.min():+.1f}..{gain.max():+.1f})",
            ]
        cells.append(f"{np.mean([r[2] for r in results]):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
