"""The curves of a reproduction: one panel per curve, one colour per arm.

Each arm's seed-mean is drawn solid over the per-seed curves drawn faint (a
seed-mean point averages the seeds that logged that step, or, where the seeds
were evaluated at different steps as often, their i-th points: `seed_mean`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rlvr_jax.repro.results import RunResult, curve_keys
from rlvr_jax.repro.spec import Reproduction


def _mean_by_index(curves) -> tuple[list[float], list[float]]:
    """Seed means of x and y at each point index (cost curves: x differs between seeds)."""
    n = min(len(x) for x, _ in curves)
    xs = [float(np.nanmean([c[0][i] for c in curves])) for i in range(n)]
    ys = [float(np.nanmean([c[1][i] for c in curves])) for i in range(n)]
    return xs, ys


def _mean_curve(curves: list[tuple[list[int], list[float]]]) -> tuple[list[int], list[float]]:
    by_step: dict[int, list[float]] = {}
    for steps, values in curves:
        for s, v in zip(steps, values, strict=True):
            if math.isfinite(v):
                by_step.setdefault(s, []).append(v)
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def seed_mean(split: str, curves: list[tuple[list, list[float]]]) -> tuple[list, list[float]]:
    """An arm's seed-mean curve: by step, or by point index where the seeds' steps differ.

    Cost curves (x = rollouts) and eval curves whose seeds were evaluated at different
    steps but as often (a pipeline whose plateau switch fired at another step in each
    seed) average the i-th points; averaging by step would zigzag between seeds.
    """
    if split == "cost":
        return _mean_by_index(curves)
    steps = {tuple(s) for s, _ in curves}
    if split == "eval" and len(steps) > 1 and len({len(s) for s in steps}) == 1:
        return _mean_by_index(curves)
    return _mean_curve(curves)


def plot_arms(repro: Reproduction, results: list[RunResult], path: Path) -> None:
    """Saves a PNG: for each curve (held-out pass@1, train reward, the method's
    per-step metrics) the arms' seed-mean curves over their faint per-seed curves."""
    import matplotlib  # lazy: heavy, and only needed for pages

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    keys = curve_keys(repro)
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.6 * nrows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (split, key, title) in zip(axes.ravel(), keys, strict=False):
        for i, arm in enumerate(repro.arms):
            colour = colours[i % len(colours)]
            curves = [
                r.curves[(split, key)]
                for r in results
                if r.run.arm.name == arm.name
                and (split, key) in r.curves
                and r.curves[(split, key)][0]
            ]
            for steps, values in curves:
                ax.plot(steps, values, color=colour, alpha=0.25, lw=0.8)
            if curves:
                steps, values = seed_mean(split, curves)
                marker = None if split == "train" else "o"
                ax.plot(steps, values, color=colour, marker=marker, label=arm.name)
        ax.set_title(title if split == "cost" else f"{title} ({split})")
        ax.set_xlabel("rollouts generated" if split == "cost" else "RL step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    for ax in axes.ravel()[len(keys) :]:
        ax.set_axis_off()
    fig.suptitle(f"{repro.slug}: {repro.paper}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=80, format="png")
    plt.close(fig)
