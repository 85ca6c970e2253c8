"""The cross-lingual train × eval matrix of "GRPO Beyond English".

One model per training language (an RL run of `make_config(language)`, resumed
or reused from its workdir), plus the common base; each evaluated on the task
rendered in every evaluation language: pass@1 and language consistency (the
share of responses that reason in the prompt's language). Cells are cached in
<out>/matrix.json as they finish, so an interrupted matrix resumes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.analysis.checkpoints import load_policy
from rlvr_jax.optim import iso_merge, task_vector_merge
from rlvr_jax.rl import trainer
from rlvr_jax.rl.build import build_policy
from rlvr_jax.train.evaluate import evaluate_task

BASE = "base"
MERGES = {"iso": iso_merge, "task_vectors": task_vector_merge}


def _task(c):
    return tasks.get(c.task.name, **json.loads(c.task.options))


def train_eval_matrix(
    make_config: Callable[[str], Any],
    train_langs: Sequence[str],
    eval_langs: Sequence[str],
    out_dir,
    *,
    num_problems: int = 64,
    n_samples: int = 8,
    seed: int = 0,
    merges: Sequence[str] = (),
) -> dict[str, Any]:
    """Trains (or reuses) one model per training language and fills the matrix.

    Args:
      make_config: language -> the locked RL config of training in that language
        (its task.options give the evaluation task of that language too).
      train_langs: rows (after the "base" row, the untrained start).
      eval_langs: columns.
      out_dir: holds train_<lang>/ run workdirs and matrix.json.
      num_problems, n_samples, seed: evaluation (test split, temperature 1).
      merges: extra rows "merge:<name>", the trained models merged with λ = 1/K
        (names of MERGES: "iso" = ISO-Merger, "task_vectors" = task arithmetic).
    Returns:
      {"cells": {"<row>-><eval>": {"pass@1", f"pass@{n}", "language_consistency"}},
       "rows", "cols", "cpu_seconds": {row: training CPU s}, "settings"}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "matrix.json"
    result = json.loads(path.read_text()) if path.is_file() else {"cells": {}, "cpu_seconds": {}}
    settings = dict(num_problems=num_problems, n_samples=n_samples, seed=seed)
    if result.get("settings", settings) != settings:
        raise ValueError(
            f"{path} holds a matrix with settings {result['settings']}; use another --out"
        )
    for name in merges:
        if name not in MERGES:
            raise ValueError(f"merge {name!r}; valid: {', '.join(MERGES)}")
    rows = [BASE, *train_langs, *(f"merge:{m}" for m in merges)]
    result.update(rows=rows, cols=list(eval_langs), settings=settings)

    def trained(lang):
        workdir = out / f"train_{lang}"
        if not (workdir / "export" / "config.json").is_file():
            start = time.process_time()
            trainer.train(make_config(lang), workdir)
            result["cpu_seconds"][lang] = round(time.process_time() - start, 1)
        return load_policy(workdir)

    for row in rows:
        todo = [lang for lang in eval_langs if f"{row}->{lang}" not in result["cells"]]
        if not todo:
            continue
        if row == BASE:
            model, tok = build_policy(make_config(train_langs[0]))
        elif row.startswith("merge:"):
            model, tok = build_policy(make_config(train_langs[0]))
            specialists = [nnx.state(trained(lang)[0], nnx.Param) for lang in train_langs]
            lambdas = [1.0 / len(specialists)] * len(specialists)
            nnx.update(model, MERGES[row[6:]](nnx.state(model, nnx.Param), specialists, lambdas))
        else:
            model, tok = trained(row)
        for lang in todo:
            c = make_config(lang)
            res = evaluate_task(
                model,
                tok,
                _task(c),
                split="test",
                num_problems=num_problems,
                n_samples=n_samples,
                max_new_tokens=c.rollout.max_new_tokens,
                seed=seed,
            )
            result["cells"][f"{row}->{lang}"] = {
                "pass@1": res["pass@1"],
                f"pass@{n_samples}": res[f"pass@{n_samples}"],
                "language_consistency": res["task_metrics"]["language_consistency"],
            }
            path.write_text(json.dumps(result, indent=2))
    return result


def markdown(result: dict[str, Any]) -> str:
    """The two matrices (pass@1, language consistency) as Markdown tables."""
    parts = []
    for metric in ("pass@1", "language_consistency"):
        head = "| train \\ eval | " + " | ".join(result["cols"]) + " |"
        lines = [f"**{metric}**", "", head, "|---" * (len(result["cols"]) + 1) + "|"]
        for row in result["rows"]:
            cells = [result["cells"][f"{row}->{c}"][metric] for c in result["cols"]]
            lines.append(f"| {row} | " + " | ".join(f"{x:.3f}" for x in cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def heatmap(result: dict[str, Any], path) -> None:
    """Two annotated heat maps (pass@1, language consistency), rows = training language.

    Each panel's colours span its own min..max (differences are small), with a colour bar.
    """
    import matplotlib  # lazy: heavy, and only needed for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    rows, cols = result["rows"], result["cols"]
    fig, axes = plt.subplots(1, 2, figsize=(2 * (2.4 + 0.7 * len(cols)), 1.2 + 0.45 * len(rows)))
    for ax, metric in zip(axes, ("pass@1", "language_consistency"), strict=True):
        m = np.array([[result["cells"][f"{r}->{c}"][metric] for c in cols] for r in rows])
        lo, hi = float(m.min()), float(m.max())
        hi = hi if hi > lo else lo + 1e-3
        image = ax.imshow(m, vmin=lo, vmax=hi, cmap="viridis", aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                dark = (m[i, j] - lo) / (hi - lo) < 0.6
                ax.text(
                    j, i, f"{m[i, j]:.3f}", ha="center", va="center", color="w" if dark else "k"
                )
        ax.set_xticks(range(len(cols)), cols)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel("evaluation language")
        ax.set_title(metric)
        fig.colorbar(image, ax=ax, fraction=0.05)
    axes[0].set_ylabel("training language (or merge)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
