"""The pipeline's evaluation: every checkpoint on every eval task, pass@k for k = 1..n.

The base and each stage's export are evaluated once (`config.eval`: held-out
split, n samples per problem at a temperature) on each task of
`config.eval.tasks`; the results are cached as `<workdir>/eval/<model>.json`
(recomputed when the eval settings change), so a resumed pipeline does not
evaluate again. In a multi-process run each process samples its share of the
problems and the per-problem results are gathered (`train.evaluate.evaluate_task`
with `split_processes`), so every process holds the result over all of them;
process 0 writes the cache. From them come the pass@k curves before and after each stage
(`passk.png`) and the models × tasks table (the fusion table).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from rlvr_jax import distributed, tasks
from rlvr_jax.models import load_pretrained
from rlvr_jax.pipeline.stage_kind import spread
from rlvr_jax.train.evaluate import evaluate_task, pass_at_k
from rlvr_jax.train.warmstart import TASK_OPTIONS, load_model_tokenizer

EVAL_DIR = "eval"
PASSK_PLOT = "passk.png"


def eval_tasks(c: ml_collections.ConfigDict) -> dict[str, dict[str, Any]]:
    """{label: {"name": task, "options": {...}}} of `config.eval.tasks`.

    Empty: the base's warm-start domain (with its warm-start options) as the one task.
    """
    if not c.eval.tasks:
        domain = c.model.domain
        return {domain: {"name": domain, "options": dict(TASK_OPTIONS.get(domain, {}))}}
    try:
        spec = json.loads(c.eval.tasks)
    except json.JSONDecodeError as e:
        raise ValueError(f"config.eval.tasks is not JSON: {e}") from None
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"config.eval.tasks must be a non-empty JSON object, got {c.eval.tasks!r}")
    out = {}
    for label, t in spec.items():
        if not isinstance(t, dict) or "name" not in t or set(t) - {"name", "options"}:
            raise ValueError(
                f"config.eval.tasks[{label!r}] = {t!r}; want {{'name': ..., 'options': {{...}}}}"
            )
        out[label] = {"name": t["name"], "options": dict(t.get("options", {}))}
    return out


def passk_curve(num_correct, n: int) -> list[float]:
    """Mean unbiased pass@k over problems for k = 1..n."""
    nc = np.asarray(num_correct)
    return [float(np.mean(pass_at_k(n, nc, k))) for k in range(1, n + 1)]


def evaluate_checkpoint(model_dir, specs: dict, e: ml_collections.ConfigDict) -> dict[str, Any]:
    """{task label: result} of one HF checkpoint on every eval task.

    A result: pass@1, pass@n, the pass@k curve (k = 1..n), mean reward, response
    length, per-problem correct counts, and per-domain pass@1 / pass@n of mixtures.
    """
    model, _ = load_pretrained(model_dir)
    spread(model)
    tokenizer = load_model_tokenizer(model_dir)
    out = {}
    for label, spec in specs.items():
        task = tasks.get(spec["name"], **spec["options"])
        n = e.n_samples
        res = evaluate_task(
            model,
            tokenizer,
            task,
            split=e.split,
            num_problems=e.num_problems,
            n_samples=n,
            temperature=e.temperature,
            max_new_tokens=e.max_new_tokens,
            seed=e.seed,
            split_processes=True,
        )
        keep = ("num_problems", "mean_reward", "mean_response_tokens", "num_correct", "reasons")
        r = {k: res[k] for k in keep}
        r["passk"] = passk_curve(res["num_correct"], n)
        r["pass@1"], r[f"pass@{n}"] = r["passk"][0], r["passk"][-1]
        r.update({k: v for k, v in res.items() if k.startswith("pass@") and "/" in k})
        out[label] = r
    return out


def cached_evaluation(workdir, model: str, model_dir, specs: dict, e) -> dict[str, Any]:
    """`evaluate_checkpoint`, cached in `<workdir>/eval/<model>.json` for these settings.

    The cache is used only when every process finds it (else all evaluate again);
    process 0 writes it.
    """
    path = Path(workdir) / EVAL_DIR / f"{model}.json"
    settings = {"tasks": specs, "eval": e.to_dict(), "model_dir": str(model_dir)}
    saved = json.loads(path.read_text()) if path.is_file() else {}
    fresh = saved.get("settings") == json.loads(json.dumps(settings))
    if distributed.everyone(fresh):
        return saved["results"]
    results = evaluate_checkpoint(model_dir, specs, e)
    if not distributed.is_logging_process():
        return results
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"settings": settings, "results": results}, indent=1))
    os.replace(tmp, path)
    return results


def results_table(evals: dict[str, dict], n: int) -> str:
    """Markdown: one row per model, pass@1 and pass@n (%) per task, and their mean."""
    models = list(evals)
    labels = list(next(iter(evals.values()))) if evals else []
    head = ["model"] + [f"{t} pass@{k}" for t in labels for k in sorted({1, n})]
    if len(labels) > 1:
        head.append("mean pass@1")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in models:
        cells = [m]
        for t in labels:
            r = evals[m].get(t, {})
            cells += [f"{100 * r[f'pass@{k}']:.1f}" if r else "-" for k in sorted({1, n})]
        if len(labels) > 1:
            ones = [evals[m][t]["pass@1"] for t in labels if t in evals[m]]
            cells.append(f"{100 * np.mean(ones):.1f}" if ones else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def domain_table(evals: dict[str, dict]) -> str:
    """Markdown: per-domain pass@1 / pass@n of the models evaluated on mixture tasks."""
    keys = sorted({k for r in evals.values() for t in r.values() for k in t if "/" in k})
    if not keys:
        return ""
    lines = ["| model | task | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for m, res in evals.items():
        for t, r in res.items():
            if any(k in r for k in keys):
                cells = [f"{100 * r[k]:.1f}" if k in r else "-" for k in keys]
                lines.append(f"| {m} | {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_passk(evals: dict[str, dict], path) -> None:
    """pass@k against k (log scale) for every model, one panel per task."""
    import matplotlib  # lazy: heavy, and only needed for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    labels = list(next(iter(evals.values())))
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 3.6), squeeze=False)
    for ax, t in zip(axes[0], labels, strict=True):
        for m, res in evals.items():
            if t in res:
                curve = res[t]["passk"]
                ax.plot(range(1, len(curve) + 1), curve, marker=".", label=m)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k")
        ax.set_title(t)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = Path(path).with_name(Path(path).name + f".tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
