"""Pipeline runs as reproduction arms: one metrics series from a pipeline's stages.

A pipeline (`rlvr_jax.pipeline`) writes each stage's run under
`stages/<name>/` and an evaluation of the base and of each stage's export under
`eval/<model>.json`; it has no metrics.jsonl of its own. `write_metrics` joins
them into one (`<workdir>/metrics.jsonl`, the file every other part of the
harness reads): the base's evaluation at step 0, then per stage in run order its
train records (steps offset by the steps of the stages before it) and its
export's evaluation, tagged `"stage": name`. An arm reads the evaluation of one
stage (`Arm.stage`; default the last), so several arms can be models of one
pipeline run (fusion's merges, Mix RL and MOPD), trained once.

Pipelines have no top-level seed: a run's seed is every stage's `run.seed`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_jax.pipeline.config import is_pipeline, stage_names
from rlvr_jax.run.metrics_file import read_metrics

EVAL_DIR, STAGES_DIR, DONE_FILE, METRICS = "eval", "stages", "stage.json", "metrics.jsonl"
VAL = "val/"  # the trainer's validation keys (`eval.validation_problems`)


def seed_fields(config: Mapping[str, Any], seed: int) -> dict[str, int]:
    """The config fields that carry a run's seed: `seed`, or every stage's `run.seed`."""
    if not is_pipeline(config):
        return {"seed": seed}
    return {
        f"stages.{n}.run.seed": seed
        for n in stage_names(config)
        if "seed" in config["stages"][n]["run"]
    }


def max_steps(config: Mapping[str, Any]) -> int:
    """Training steps of a run: `train.steps`, or the sum of the stages' caps."""
    if not is_pipeline(config):
        return int(config["train"]["steps"])
    runs = [config["stages"][n]["run"] for n in stage_names(config)]
    return sum(int(r["train"]["steps"]) for r in runs if "train" in r and "steps" in r["train"])


def group_size(config: Mapping[str, Any]) -> int:
    """G of a run (a pipeline's: its last stage that samples groups; 1 if none)."""
    if not is_pipeline(config):
        return int(config["data"]["group_size"])
    for n in reversed(stage_names(config)):
        data = config["stages"][n]["run"].get("data", {})
        if "group_size" in data:
            return int(data["group_size"])
    return 1


def _pass_at(result: Mapping[str, Any]) -> dict[str, float]:
    """A task's pass@k values: its "pass@k" keys, and pass@k for k = 1..n from its curve."""
    out = {k: v for k, v in result.items() if k.startswith("pass@")}
    for k, v in enumerate(result.get("passk", ()), start=1):
        out.setdefault(f"pass@{k}", float(v))
    return out


def eval_record(results: Mapping[str, Mapping[str, Any]], step: int, stage: str) -> dict:
    """One eval record from a pipeline evaluation {task: {"pass@k": value, "passk": curve}}.

    A task's pass@k: its "pass@k" keys, and every k of its pass@k curve (`passk`,
    k = 1..n). One task: those keys as they are. Several: each as "<task>/pass@k" and
    "pass@k" as the mean over the tasks that report it.
    """
    rec: dict[str, Any] = {"step": step, "split": "eval", "stage": stage}
    results = {t: _pass_at(r) for t, r in results.items()}
    tasks = list(results)
    if len(tasks) == 1:
        rec.update(results[tasks[0]])
        return rec
    keys = sorted({k for r in results.values() for k in r if k.startswith("pass@")})
    for k in keys:
        values = [float(results[t][k]) for t in tasks if k in results[t]]
        rec[k] = float(np.mean(values)) if len(values) == len(tasks) else math.nan
        rec.update({f"{t}/{k}": results[t][k] for t in tasks if k in results[t]})
    return rec


def _read_jsonl(path: Path) -> list[dict]:
    return read_metrics(path) if path.is_file() else []


def joined_records(workdir: Path, config: Mapping[str, Any]) -> list[dict] | None:
    """The pipeline's metrics series, or None while a stage or an evaluation is missing."""
    workdir = Path(workdir)
    names = stage_names(config)
    evals = {}
    for model in ["base", *names]:
        path = workdir / EVAL_DIR / f"{model}.json"
        if not path.is_file():
            return None
        evals[model] = json.loads(path.read_text())["results"]
    out, offset = [eval_record(evals["base"], 0, "base")], 0
    for n in names:
        done = workdir / STAGES_DIR / n / DONE_FILE
        if not done.is_file():
            return None
        stage = _read_jsonl(workdir / STAGES_DIR / n / METRICS)
        train = [r for r in stage if r["split"] == "train"]
        out += [dict(r, step=r["step"] + offset, stage=n) for r in train]
        steps = json.loads(done.read_text()).get("steps")
        offset += int(steps) if steps is not None else max((r["step"] for r in train), default=0)
        out.append(eval_record(evals[n], offset, n) | validation_values(stage))
    return out


def validation_values(stage_records: list[dict]) -> dict[str, Any]:
    """The `val/*` values of a stage's last evaluation (`eval.validation_problems`: the
    validation split a repro sweep compares), {} when the stage evaluated none."""
    evals = [r for r in stage_records if r["split"] == "eval"]
    return {k: v for k, v in evals[-1].items() if k.startswith(VAL)} if evals else {}


def write_metrics(workdir: Path, config: Mapping[str, Any]) -> bool:
    """Writes `<workdir>/metrics.jsonl` from the stages once every stage is evaluated."""
    records = joined_records(workdir, config)
    if records is None:
        return False
    tmp = Path(workdir) / (METRICS + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(Path(workdir) / METRICS)
    return True


def is_finished(records: list[dict], config: Mapping[str, Any]) -> bool:
    """The series holds the evaluation of the pipeline's last stage."""
    last = stage_names(config)[-1]
    return any(r["split"] == "eval" and r.get("stage") == last for r in records)


def arm_records(records: list[dict], stage: str) -> list[dict]:
    """The series up to the evaluation of `stage` (its evaluation is the arm's final)."""
    for i, r in enumerate(records):
        if r["split"] == "eval" and r.get("stage") == stage:
            return records[: i + 1]
    return []
