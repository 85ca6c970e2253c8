"""Evaluate a saved policy (a Hugging Face-format directory) on a verifiable task.

The directory holds `config.json`, `model.safetensors` and the tokenizer file,
as written by `rlvr_jax.models.save_pretrained` + `warmstart.save_tokenizer`
(warm-start models, and the trainer's final export). A run workdir is accepted
too: its `export/` subdirectory holds the final policy.

  result = evaluate_model_dir("runs/grpo", "countdown", task_options={"num_numbers": 3})
  print(markdown_summary(result))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_jax import tasks
from rlvr_jax.models import load_pretrained
from rlvr_jax.tasks.options import resolve_options
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.warmstart import load_model_tokenizer

EXPORT_DIR = "export"


def resolve_model_dir(model_dir) -> Path:
    """`model_dir`, or its `export/` subdirectory when it is a run workdir.

    Args:
      model_dir: a model directory or a run workdir.
    Returns:
      The directory holding config.json. Raises FileNotFoundError naming the
      path when it is missing or has no config.json.
    """
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist")
    if (path / EXPORT_DIR / "config.json").is_file():
        return path / EXPORT_DIR
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} has no config.json (nor {EXPORT_DIR}/config.json); expected a model "
            "directory written by rlvr_jax.models.save_pretrained or a run workdir"
        )
    return path


def run_task(workdir) -> tuple[str, dict[str, Any]] | None:
    """The task name and options an RL run trained on, from its workdir's config.json.

    Args:
      workdir: a run workdir (its config.json is the run's ml_collections config;
        a model directory's config.json is a Hugging Face one and is not matched).
    Returns:
      (task name, task options as the trainer resolved them), or None when the
      path holds no RL run config.
    """
    path = Path(workdir).expanduser() / "config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not {"task", "model"} <= set(data):
        return None

    task, model = data["task"], data["model"]
    domain = model["domain"] if model.get("source") == "warm_start" else ""
    return task["name"], resolve_options(task.get("options", ""), task["name"], domain)


def parse_options(items: list[str]) -> dict[str, Any]:
    """Parses ["name=value", ...] into a dict; values are JSON literals, else strings.

    Args:
      items: e.g. ["num_numbers=3", "operators=+-", "flag=true"].
    Returns:
      e.g. {"num_numbers": 3, "operators": "+-", "flag": True}. Raises
      ValueError naming an item without "=" or an empty name.
    """
    options: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"task option {item!r} is not of the form name=value")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw  # bare words like +- or easy are strings
        options[name.strip()] = value
    return options


def evaluate_model_dir(
    model_dir,
    task_name: str,
    *,
    task_options: dict | None = None,
    split: str = "test",
    num_problems: int = 128,
    n_samples: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Loads a saved policy and its tokenizer and evaluates it with `evaluate_task`.

    Args:
      model_dir: a model directory or a run workdir with `export/` (see `resolve_model_dir`).
      task_name: a name of `rlvr_jax.tasks.get`.
      task_options: the task's options (difficulty); None = the task's defaults.
      split: problem split.
      num_problems: how many problems, the first of the split.
      n_samples: n, responses per problem.
      temperature: sampling temperature (0 = greedy).
      max_new_tokens: decode budget per response.
      seed: PRNG seed.
    Returns:
      `evaluate_task`'s dict ("pass@1", f"pass@{n}", "mean_reward", "reasons",
      "num_correct", ...) plus f"avg@{n}" (mean over problems of c/n), "model_dir"
      (the resolved directory), "task", "task_options" and "split".
    """
    # Lazy: keeps `parse_options` / `markdown_summary` free of the JAX stack.

    path = resolve_model_dir(model_dir)
    task_options = dict(task_options or {})
    task = tasks.get(task_name, **task_options)
    model, _ = load_pretrained(path)
    tokenizer = load_model_tokenizer(path)
    out = evaluate_task(
        model,
        tokenizer,
        task,
        split=split,
        num_problems=num_problems,
        n_samples=n_samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    out[f"avg@{n_samples}"] = float(np.mean(np.asarray(out["num_correct"]) / n_samples))
    out.update(model_dir=str(path), task=task_name, task_options=task_options, split=split)
    return out


def markdown_summary(result: dict[str, Any]) -> str:
    """A markdown table of one `evaluate_model_dir` result (pass@1, pass@n, avg@n, reward).

    Args:
      result: the dict `evaluate_model_dir` returns.
    Returns:
      The table, then a line with the verdict counts ("reasons").
    """
    n = result["n_samples"]
    keys = sorted({"pass@1", f"pass@{n}"}, key=lambda k: int(k.split("@")[1]))
    header = ["task", "split", "problems x n"] + keys + [f"avg@{n}", "mean reward"]
    cells = [result.get("task", "?"), result.get("split", "?"), f"{result['num_problems']} x {n}"]
    cells += [f"{100 * result[k]:.1f}%" for k in keys + [f"avg@{n}"]]
    cells.append(f"{result['mean_reward']:.3f}")
    reasons = ", ".join(f"{r} {c}" for r, c in result["reasons"].items())
    return (
        "| " + " | ".join(header) + " |\n"
        + "|" + "---|" * len(header) + "\n"
        + "| " + " | ".join(cells) + " |\n\n"
        + f"reasons: {reasons}\n"
    )  # fmt: skip
