"""The run report: a markdown results table and a PNG of the training curves.

Both are built from the run's `metrics.jsonl` (written by
`rlvr_jax.run.logger.MetricsLogger`): the "eval" records give the table
(held-out pass@k before and after RL), all records give the curves. The run's
`config.json` gives what a reader needs to trust and repeat them: the evaluation's
settings (`train.eval_checkpoint.run_eval_settings`, the ones `scripts/evaluate.py`
uses on the run), the digests of the initial and final weights, and the curves'
title (run, algorithm, seed, base model). `run_summary` is the few lines a run
prints when it ends: pass@k before → after and where its outputs are.

  results_md, curves_png = write_report(workdir)
  print(run_summary(workdir))
"""

from __future__ import annotations

import json
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
# What each panel's y-axis measures (its title names the quantity).
_Y_LABELS = {
    "train reward": "mean over rollouts",
    "held-out pass@k": "fraction of problems",
    "KL to reference": "nats / token",
    "entropy": "nats / token",
    "response length (tokens)": "tokens",
    "rollout stage": "per step",
    "importance weights": "per token",
    "clip rate by group success": "fraction of tokens",
}
# Series of one panel drawn distinguishably even where they coincide (reward = pass rate
# under a 0/1 reward): solid, then dashed with markers, then dotted.
_STYLES = (dict(linestyle="-"), dict(linestyle="--", marker="x", markevery=0.1),
           dict(linestyle=":", marker="s", markevery=0.1, fillstyle="none"))  # fmt: skip


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


def plot_curves(records: list[dict], path, title: str = "") -> None:
    """Saves a PNG with one panel per available curve group.

    Panels: train reward (+ pass_rate), eval pass@k over steps, KL,
    entropy, response length (train and eval). Series missing from `records` are
    skipped (a panel without any is not drawn); with none at all the figure says
    so. Each panel labels its y-axis; the series of one panel differ in line style
    and marker too, so two that coincide (reward and pass rate) both show.

    Args:
      records: metrics records (see `read_metrics`).
      path: the PNG file to write.
      title: the figure's title (e.g. `curves_title`), none if empty.
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
    for ax, (name, series) in zip(flat, panels, strict=False):
        for i, (split, key, label) in enumerate(series):
            steps, values = _series(records, split, key)
            style = dict(_STYLES[i % len(_STYLES)])
            if split == "eval":
                style.update(marker=style.get("marker", "o"), markevery=None)
            if split == "eval" or len(values) < 20:
                ax.plot(steps, values, label=label, **style)
            else:  # noisy per-step curves: faint raw values under a moving average
                (line,) = ax.plot(steps, values, alpha=0.3, linestyle=style["linestyle"])
                window = max(2, len(values) // 20)
                ax.plot(steps, _smooth(values, window), color=line.get_color(), label=label,
                        **style)  # fmt: skip
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel(_Y_LABELS.get(name, ""))
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize="small")
    for ax in flat[max(1, len(panels)) :]:
        fig.delaxes(ax)  # no empty frame where the grid has more cells than panels
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def _weights_line(label: str, model_dir) -> str:
    from rlvr_jax.train.eval_checkpoint import model_digest  # lazy: the JAX stack

    try:
        return f"- {label}: `{model_dir}` ({model_digest(model_dir)})"
    except FileNotFoundError:
        return f"- {label}: `{model_dir}` (no weights there now)"


def initial_weights(config: dict[str, Any]) -> str | None:
    """Where a run's initial policy came from: its model directory, or None (random init).

    A warm-start base is the cached model of (model.domain, model.role); it is trained
    on the machine that first needs it, so two machines can hold different bases.
    """
    m = config["model"]
    if m["source"] == "pretrained":
        return m["path"]
    if m["source"] != "warm_start":
        return None
    from rlvr_jax.train import warmstart  # lazy: the JAX stack

    spec = warmstart.get_spec(m["domain"], m["role"])
    return str(warmstart.model_dir(spec, warmstart.default_tokenizer()))


def settings_section(workdir, config: dict[str, Any]) -> str:
    """The results.md lines naming the evaluation's settings and the weights' digests."""
    from rlvr_jax.train.eval_checkpoint import format_settings, run_eval_settings  # lazy

    if "rollout" not in config or "eval" not in config:  # an SFT stage's config: no RL eval
        return ""
    m = config["model"]
    lines = ["", "## Evaluation", "",
             f"- every row: {format_settings(run_eval_settings(config))}, "
             f"task {config['task']['name']}"]  # fmt: skip
    base = initial_weights(config)
    if base is None:
        lines.append(f"- initial policy: random `{m['random_size']}` model, seed {config['seed']}")
    else:
        lines.append(_weights_line(f"initial policy ({m['source']})", base))
    export = Path(workdir) / "export"
    if export.is_dir():
        lines.append(_weights_line("final policy", export))
        lines.append("- the last row again: `python scripts/evaluate.py <this directory>`")
    return "\n".join(lines) + "\n"


def curves_title(name: str, config: dict[str, Any]) -> str:
    """The curves' title: run, algorithm (credit / loss / select), seed and base model."""
    m = config["model"]
    algo = " / ".join(config[k]["name"] for k in ("credit", "loss", "select") if k in config)
    source = m.get("source")  # an SFT stage's `model` block holds only execution fields
    base = f"{m['domain']}-{m['role']}" if source == "warm_start" else source
    if source == "random":
        base = f"random {m['random_size']}"
    elif source == "pretrained":
        base = Path(m["path"]).name
    based = f", base {base}" if base else ""
    return f"{name}: {algo}, seed {config['seed']}{based}, task {config['task']['name']}"


def write_report(workdir) -> tuple[Path, Path]:
    """Writes `workdir/results.md` and `workdir/curves.png` from `workdir/metrics.jsonl`.

    With the run's config.json there, results.md also names the evaluation
    settings and weight digests (`settings_section`) and the curves get a title.

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
    config = _run_config(workdir)
    results, curves = workdir / RESULTS_FILE, workdir / CURVES_FILE
    text = f"# Results: {workdir.name}\n\n{results_table(records)}"
    title = ""
    if config is not None:
        text += settings_section(workdir, config)
        title = curves_title(workdir.name, config)
    _write_atomic(results, lambda p: p.write_text(text, encoding="utf-8"))
    _write_atomic(curves, lambda p: plot_curves(records, p, title))
    return results, curves


def _run_config(workdir: Path) -> dict[str, Any] | None:
    path = workdir / "config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) and {"model", "task", "eval"} <= set(data) else None


def final_eval(workdir) -> dict[str, Any]:
    """A finished run's last evaluation record (metrics only: no step, split or time)."""
    rows = _eval_rows(read_metrics(Path(workdir) / METRICS_FILE))
    if not rows:
        raise ValueError(f"{workdir}: {METRICS_FILE} holds no evaluation")
    return {k: v for k, v in rows[-1].items() if k not in ("step", "split", "time")}


def run_summary(workdir, *, already_finished: bool = False) -> str:
    """The lines a run prints when it ends: pass@k before → after, then its outputs.

    Args:
      workdir: the run directory (its metrics.jsonl; outputs listed where they exist).
      already_finished: say that nothing ran ("already finished at step N").
    Returns:
      The text (ends with a newline).
    """
    workdir = Path(workdir)
    metrics = workdir / METRICS_FILE
    rows = _eval_rows(read_metrics(metrics)) if metrics.is_file() else []
    step = rows[-1]["step"] if rows else "?"
    head = f"already finished at step {step}" if already_finished else f"finished at step {step}"
    lines = [f"{workdir}: {head}" + (" (rerun with --rerun to evaluate again)"
                                     if already_finished else "")]  # fmt: skip
    if rows:
        first, last = rows[0], rows[-1]
        for key in _at_keys(rows, "pass"):
            a, b = first.get(key), last.get(key)
            if _is_number(a) and _is_number(b) and len(rows) > 1:
                lines.append(f"  {key}: {100 * a:.1f}% → {100 * b:.1f}% ({100 * (b - a):+.1f})")
            elif _is_number(b):
                lines.append(f"  {key}: {100 * b:.1f}% at step {last['step']}")
    for name in (RESULTS_FILE, CURVES_FILE, METRICS_FILE, "tensorboard", "wandb", "export"):
        path = workdir / name
        if path.exists():
            lines.append(f"  {name + ('/' if path.is_dir() else ''):14s} {path}")
    return "\n".join(lines) + "\n"


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
