"""Evaluate a saved policy (a Hugging Face-format directory) on a verifiable task.

The directory holds `config.json`, `model.safetensors` and the tokenizer file,
as written by `rlvr_jax.models.save_pretrained` + `warmstart.save_tokenizer`
(warm-start models, and the trainer's final export). A run workdir is accepted
too: its `export/` subdirectory holds the final policy.

  result = evaluate_model_dir("runs/grpo", "countdown", task_options={"num_numbers": 3})
  print(markdown_summary(result))

A run is evaluated as its trainer evaluated it (`run_eval_settings`: the run's
problems, samples, temperature, token budget and seed) so that the numbers equal
the run's `results.md`; `evaluate_run` does that from the workdir alone. Every
result carries its `settings` (and the evaluated weights' `model_digest`), which
`format_settings` writes as one line for results.md and the script.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from rlvr_jax import tasks
from rlvr_jax.models import load_pretrained
from rlvr_jax.tasks.options import resolve_options
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.multiturn import evaluate_episodes
from rlvr_jax.train.warmstart import load_model_tokenizer

EXPORT_DIR = "export"
# The settings of a model directory that is not a run (no run config to read them from).
EVAL_DEFAULTS = dict(
    split="test", num_problems=128, n_samples=8, temperature=1.0, max_new_tokens=64, seed=0
)
SETTING_KEYS = tuple(EVAL_DEFAULTS)
# Above this many bytes of weights the digest hashes each file's name, size and first MiB
# (the safetensors header), not every byte: a 16 GB checkpoint would take minutes.
_FULL_DIGEST_BYTES = 2 << 30


def read_run_config(workdir) -> dict[str, Any] | None:
    """An RL run's config (its workdir's config.json as a dict), or None if it holds none.

    A model directory's config.json is a Hugging Face one (no "task" and "model"
    sections) and gives None.
    """
    path = Path(workdir).expanduser() / "config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not {"task", "model", "eval"} <= set(data):
        return None
    return data


def run_eval_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The evaluation settings of a run, as `rl.trainer.Trainer.evaluate` uses them.

    Args:
      config: the run's config as a dict (its config.json, or `json.loads(c.to_json())`).
    Returns:
      {"split", "num_problems", "n_samples", "temperature", "max_new_tokens", "seed"}:
      eval.split / num_problems / n_samples / temperature, rollout.max_new_tokens
      (the responses are cut where training cuts them) and seed + 1 (the trainer's
      evaluation key is the run's seed + 1: the evaluation never reuses a rollout key);
      plus "sampler" (the `Sampler` options, `eval_sampler`) when the run samples with
      the paged engine: the evaluation samples on the run's engine.
    """
    e = config["eval"]
    engine = eval_sampler(config)
    return ({"sampler": engine} if engine else {}) | dict(
        split=e["split"],
        num_problems=int(e["num_problems"]),
        n_samples=int(e["n_samples"]),
        temperature=float(e["temperature"]),
        max_new_tokens=int(config["rollout"]["max_new_tokens"]),
        seed=int(config["seed"]) + 1,
    )


def model_digest(model_dir) -> str:
    """The "sha256:<16 hex>" of a model directory's weights (its *.safetensors files, by name).

    Two directories with the same digest hold the same weights. Over
    `_FULL_DIGEST_BYTES` of weights, each file's name, size and first MiB are hashed
    instead (marked "sha256-head:"). Raises FileNotFoundError when there is no
    safetensors file.
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {model_dir}")
    full = sum(f.stat().st_size for f in files) <= _FULL_DIGEST_BYTES
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            if not full:
                h.update(fh.read(1 << 20))
                continue
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return f"{'sha256' if full else 'sha256-head'}:{h.hexdigest()[:16]}"


def eval_sampler(config: dict[str, Any]) -> dict[str, Any]:
    """The `Sampler` options an evaluation of the run uses: {} (the static sampler) unless
    `rollout.engine` is "paged", then that engine with the run's page size, decode slots,
    prefill chunk, kernel and page budget (`rollout.cache_gib`; 0: the engine's default).

    The static sampler stays the evaluation of static runs, so their recorded results
    are reproduced sample for sample; a paged run evaluates on the engine it trains with
    (512-row evaluations are where the engine wins most: docs/benchmarks.md).
    """
    r = config["rollout"]
    if r.get("engine", "static") != "paged":
        return {}
    return dict(
        engine="paged",
        page_size=int(r["page_size"]),
        decode_slots=int(r["decode_slots"]),
        prefill_chunk=int(r["prefill_chunk"]),
        paged_kernel=r["paged_kernel"],
        paged_block_pages=int(r["paged_block_pages"]),
        cache_bytes=int(float(r["cache_gib"]) * 2**30) or None,
        cache_dtype=r["cache_dtype"] or None,
    )


def format_settings(settings: dict[str, Any]) -> str:
    """One line naming an evaluation's settings, e.g. "128 problems (test split) x 8
    samples, temperature 1.0, at most 64 new tokens, seed 1, model sha256:..."."""
    s = settings
    line = (
        f"{s['num_problems']} problems ({s['split']} split) x {s['n_samples']} samples, "
        f"temperature {s['temperature']:g}, at most {s['max_new_tokens']} new tokens, "
        f"seed {s['seed']}"
    )
    if s.get("sampler"):
        e = s["sampler"]
        line += f", {e['engine']} engine ({e['page_size']}-token pages, {e['decode_slots']} slots)"
    return line + (f", model {s['model_digest']}" if s.get("model_digest") else "")


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
    data = read_run_config(workdir)
    if data is None:
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
    split: str = EVAL_DEFAULTS["split"],
    num_problems: int = EVAL_DEFAULTS["num_problems"],
    n_samples: int = EVAL_DEFAULTS["n_samples"],
    temperature: float = EVAL_DEFAULTS["temperature"],
    max_new_tokens: int = EVAL_DEFAULTS["max_new_tokens"],
    seed: int = EVAL_DEFAULTS["seed"],
    param_dtype: str = "float32",
    dtype: str = "",
    sampler: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Loads a saved policy and its tokenizer and evaluates it as the trainer does.

    A single-turn task is evaluated by `evaluate_task`, a multi-turn one
    (`task.episode_turns()`) on whole episodes by `evaluate_episodes`: the
    functions `rl.trainer.Trainer.evaluate` calls.

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
      param_dtype, dtype: the parameter and compute dtypes to load the weights in
        ("float32" / "bfloat16"; dtype "" = param_dtype): a run's model.param_dtype
        and model.dtype give its trainer's numerics.
      sampler: `Sampler` options (`eval_sampler`: a paged run's engine); None: static.
    Returns:
      The evaluation's dict ("pass@1", f"pass@{n}", "mean_reward", "reasons",
      "num_correct", ...) plus f"avg@{n}" (mean over problems of c/n), "model_dir"
      (the resolved directory), "task", "task_options", "split" and "settings"
      (the keys of `EVAL_DEFAULTS`, "sampler" when given, and "model_digest", see
      `format_settings`).
    """
    path = resolve_model_dir(model_dir)
    task_options = dict(task_options or {})
    task = tasks.get(task_name, **task_options)
    model, _ = load_pretrained(
        path, jnp.dtype(param_dtype), compute_dtype=jnp.dtype(dtype or param_dtype)
    )
    tokenizer = load_model_tokenizer(path)
    settings = dict(
        split=split,
        num_problems=num_problems,
        n_samples=n_samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    ) | ({"sampler": dict(sampler)} if sampler else {})
    if task.episode_turns():
        turns = task.episode_turns()
        out = evaluate_episodes(
            model, tokenizer, task, env_factory=task.env, max_turns=turns, **settings
        )
    else:
        out = evaluate_task(model, tokenizer, task, **settings)
    out[f"avg@{n_samples}"] = float(np.mean(np.asarray(out["num_correct"]) / n_samples))
    settings["model_digest"] = model_digest(path)
    out.update(
        model_dir=str(path), task=task_name, task_options=task_options, split=split,
        settings=settings,
    )  # fmt: skip
    return out


def evaluate_run(
    workdir, *, task_name: str | None = None, task_options: dict | None = None, **overrides
) -> dict[str, Any]:
    """Evaluates a run's exported policy with the run's own task and settings.

    The result equals the run's final evaluation (its results.md "after" row): same
    task and options (`run_task`), settings (`run_eval_settings`) and dtypes.

    Args:
      workdir: a run workdir holding config.json and export/.
      task_name: another task to evaluate on (default: the run's), with `task_options`
        (default: none); without `task_name`, `task_options` update the run's options.
      overrides: settings to change (keys of `EVAL_DEFAULTS`; None values are ignored).
    Returns:
      `evaluate_model_dir`'s dict. Raises ValueError when `workdir` holds no run
      config, or an override names no setting.
    """
    config = read_run_config(workdir)
    if config is None:
        raise ValueError(f"{workdir} holds no RL run config.json (is it a run workdir?)")
    unknown = sorted(set(overrides) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(f"unknown evaluation settings {unknown}; valid: {', '.join(SETTING_KEYS)}")
    task, options = run_task(workdir)
    if task_name is not None:
        task, options = task_name, {}
    options = options | dict(task_options or {})
    settings = run_eval_settings(config) | {k: v for k, v in overrides.items() if v is not None}
    m = config["model"]
    return evaluate_model_dir(
        workdir, task, task_options=options, param_dtype=m["param_dtype"], dtype=m["dtype"],
        **settings,
    )  # fmt: skip


def markdown_summary(result: dict[str, Any]) -> str:
    """A markdown table of one `evaluate_model_dir` result (pass@1, pass@n, avg@n, reward).

    Args:
      result: the dict `evaluate_model_dir` returns.
    Returns:
      The table, then a line with the verdict counts ("reasons") and one with the
      settings (`format_settings`) when the result has them.
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
        + (f"settings: {format_settings(result['settings'])}\n" if "settings" in result else "")
    )  # fmt: skip
