"""Runs a pipeline config: its stages in order, in one workdir, resuming where it stopped.

  <workdir>/config.json            the pipeline config (a rerun with other stages is refused)
  <workdir>/base/                  the base checkpoint when the base is a random init
  <workdir>/stages/<name>/         each stage's run (config.json, metrics.jsonl,
                                   checkpoints/, results.md, export/) and stage.json,
                                   written when the stage is complete
  <workdir>/eval/<model>.json      the evaluation of the base and of each export
  <workdir>/results.md, passk.png  one section per stage, the models x tasks table,
                                   the pass@k curves before and after each stage

A rerun skips the stages that have their stage.json and resumes the first one
that does not from its own last checkpoint (a kill -9 in stage 2 resumes stage
2 at its last checkpoint; stage 1 is not run again). A SIGTERM in a training
stage checkpoints it and returns {"preempted": True, ...}.

Multi-process (one process per host, `rlvr_jax.distributed`; the workdir on a
filesystem every host sees, as for orbax checkpoints): every process runs every
stage together (each stage kind says how it splits the work); process 0 alone
writes the files above and holds the lock, and every process waits at a barrier
after each stage so none reads a half-written export. A stage is skipped only
when every process sees its stage.json.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import ml_collections

from rlvr_jax import distributed
from rlvr_jax.models import save_pretrained
from rlvr_jax.pipeline import evaluate, stages
from rlvr_jax.pipeline.config import init_of, stage_names, validate
from rlvr_jax.rl import build
from rlvr_jax.rl.config import default_config
from rlvr_jax.run.run_io import RESUMABLE_PREFIXES, lock_on_chief
from rlvr_jax.train.warmstart import load_warm_start, save_tokenizer

log = logging.getLogger(__name__)

CONFIG_FILE, DONE_FILE, RESULTS_FILE = "config.json", "stage.json", "results.md"
LOCK_FILE = "pipeline.lock"


def _write_atomic(path: Path, text: str) -> None:
    """Writes `path` from process 0 only (whole or not at all)."""
    if not distributed.is_logging_process():
        return
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _check_config(workdir: Path, c: ml_collections.ConfigDict, allow=()) -> None:
    """Refuses a workdir holding another pipeline.

    Free to change: `eval.*`; stages appended after the saved ones; and in every
    stage's run config what a single run may change on resume
    (`run_io.RESUMABLE_PREFIXES`) or `allow` names (each stage's RunIO then
    checks its own run).
    """
    current = json.loads(c.to_json())
    path = workdir / CONFIG_FILE
    if path.is_file():
        saved = json.loads(path.read_text())
        a, b = _flat(saved), _flat(current)
        fields = [*RESUMABLE_PREFIXES, *(f"{x}." for x in allow), *allow]
        free = re.compile(
            r"^(eval\.|stages\.[^.]+\.run\.(" + "|".join(map(re.escape, fields)) + "))"
        )
        # Stages appended after the saved ones are new work, not a change of the old.
        old, new = stage_names(ml_collections.ConfigDict(saved)), stage_names(c)
        if new[: len(old)] == old:
            added = tuple(f"stages.{n}." for n in new[len(old) :])
            a, b = ({k: v for k, v in d.items() if k != "order"} for d in (a, b))
            b = {k: v for k, v in b.items() if not k.startswith(added)} if added else b
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not free.match(k))
        if diff:
            shown = ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:8])
            raise ValueError(f"{path} holds another pipeline ({shown}); use a new --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, json.dumps(current, indent=2, sort_keys=True))


def base_dir(c: ml_collections.ConfigDict, workdir: Path) -> str:
    """The HF directory of the base model (trained / saved first if needed)."""
    m = c.model
    if m.source == "pretrained":
        if not m.path:
            raise ValueError(
                "config.model.path is empty; config.model.source 'pretrained' needs it"
            )
        return m.path
    if m.source == "warm_start":
        return str(load_warm_start(m.domain, m.role).path)
    if m.source != "random":
        valid = "warm_start, pretrained, random"
        raise ValueError(f"config.model.source = {m.source!r}; valid: {valid}")
    out = workdir / "base"
    if distributed.is_logging_process() and not (out / "config.json").is_file():
        rc = default_config()
        rc.model.source, rc.model.random_size, rc.seed = "random", m.random_size, m.seed
        model, tokenizer = build.build_policy(rc)
        tmp = workdir / f"base.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        save_pretrained(model, model.config, tmp)
        save_tokenizer(tokenizer, tmp)
        os.replace(tmp, out)
    distributed.sync("rlvr_jax_pipeline_base")
    return str(out)


def run(config: ml_collections.ConfigDict, workdir, allow_config_change=()) -> dict[str, Any]:
    """Runs (or resumes) the pipeline of `config` in `workdir` (locked while it runs).

    Args:
      config: a pipeline config (`pipeline.config`).
      workdir: its directory.
      allow_config_change: run-config fields every stage's resume may change
        (as `rl.trainer.train`'s), e.g. ("optimizer.lr",).
    Returns:
      {"stages": {name: its result}, "eval": {model: {task: pass@1}}}, or
      {"preempted": True, "stage": name, "step": s} when a signal stopped a stage.
    """
    validate(config)
    workdir = Path(workdir)
    lock = lock_on_chief(workdir / LOCK_FILE, f"pipeline directory {workdir}")
    try:
        return _run(config, workdir, tuple(allow_config_change))
    finally:
        if lock is not None:
            lock.release()


def _run(c: ml_collections.ConfigDict, workdir: Path, allow: tuple[str, ...]) -> dict[str, Any]:
    _check_config(workdir, c, allow)
    specs = evaluate.eval_tasks(c)
    exports = {"base": base_dir(c, workdir)}
    evals, done = {}, {}
    if c.eval.enabled:
        evals["base"] = evaluate.cached_evaluation(workdir, "base", exports["base"], specs, c.eval)
    for name in stage_names(c):
        s, sdir = c.stages[name], workdir / "stages" / name
        init = init_of(c, name)
        marker = sdir / DONE_FILE
        if distributed.everyone(marker.is_file()):
            done[name] = json.loads(marker.read_text())
        else:
            k = stages.kind(s.kind)
            run_cfg = stages.resolve(s.run, k, exports[init], exports, c.model)
            ctx = stages.StageContext(
                name, s.kind, run_cfg, s.switch, sdir, exports[init], dict(exports), c.model, allow
            )
            log.info("pipeline: stage %s (%s) from %s", name, s.kind, init)
            result = k.run(ctx)
            if result.get("preempted"):
                return {"preempted": True, "stage": name, "step": result.get("step")}
            done[name] = {"kind": s.kind, "init": init, "result": result}
            if k.switchable:
                steps, limit = result["steps"], run_cfg.train.steps
                done[name].update(steps=steps, switched=steps < limit, max_steps=limit)
            _write_atomic(marker, json.dumps(done[name], indent=2))
            distributed.sync(f"rlvr_jax_pipeline_stage_{name}")  # its export is complete
        exports[name] = str(sdir / "export")
        if c.eval.enabled:
            evals[name] = evaluate.cached_evaluation(workdir, name, exports[name], specs, c.eval)
        write_report(workdir, c, done, evals)
    return {
        "stages": {n: d["result"] for n, d in done.items()},
        "eval": {m: {t: r["pass@1"] for t, r in res.items()} for m, res in evals.items()},
    }


def _note(c, name: str, d: dict) -> str:
    r, s = d["result"], c.stages[name]
    if d["kind"] == "merge":
        return f"{r['method']} of {r['specialists']}, λ = {r['lambdas']}"
    if d["kind"] == "sft":
        data = ", ".join(f"{k[5:]} {v}" for k, v in r.items() if k.startswith("data_"))
        return f"{s.run.data.source} data: {data}"
    if d.get("switched"):
        sw = s.switch
        return (
            f"switched at step {d['steps']}/{d['max_steps']}: {sw.metric} gained ≤ "
            f"{sw.delta} over {sw.patience} evaluations"
        )
    if s.switch.patience:
        return f"ran all {d['steps']} steps (no plateau)"
    return ""


def write_report(workdir: Path, c, done: dict, evals: dict) -> None:
    """results.md (stage table, evaluation table, each stage's own report) and passk.png.

    Process 0 writes them; the others return.
    """
    if not distributed.is_logging_process():
        return
    lines = [f"# Pipeline {workdir.name}", "", "| # | stage | kind | starts from | note |"]
    lines.append("|---|---|---|---|---|")
    for i, (name, d) in enumerate(done.items()):
        lines.append(f"| {i + 1} | {name} | {d['kind']} | {d['init']} | {_note(c, name, d)} |")
    if evals:
        e = c.eval
        lines += [
            "",
            f"## Evaluation ({e.split} split, {e.num_problems} problems, "
            f"n = {e.n_samples} samples at T = {e.temperature})",
            "",
        ]
        lines.append(evaluate.results_table(evals, e.n_samples))
        per_domain = evaluate.domain_table(evals)
        if per_domain:
            lines += ["Per domain (mixture tasks):", "", per_domain]
        evaluate.plot_passk(evals, workdir / evaluate.PASSK_PLOT)
        lines += [f"pass@k for k = 1..{e.n_samples}: ![pass@k]({evaluate.PASSK_PLOT})", ""]
    for name, d in done.items():
        lines += ["", f"## Stage {name} ({d['kind']}, from {d['init']})", ""]
        report = workdir / "stages" / name / RESULTS_FILE
        if report.is_file():
            lines.append(report.read_text())
        lines.append(json.dumps(d["result"], sort_keys=True))
    _write_atomic(workdir / RESULTS_FILE, "\n".join(lines) + "\n")


def evaluation_table(workdir, *, tasks: str = "", num_problems: int = 0, n_samples: int = 0) -> str:
    """The models x tasks table of a pipeline workdir: the base and every finished stage.

    Evaluations cached by the pipeline are reused; other settings (the
    arguments, which override `config.eval`) evaluate again and replace them.

    Args:
      workdir: a pipeline's workdir (its config.json and stages/).
      tasks: `config.eval.tasks`-style JSON ("" = the pipeline's).
      num_problems, n_samples: 0 = the pipeline's.
    Returns:
      Markdown: pass@1 / pass@n per model and task, then per-domain rows for mixtures.
    """
    workdir = Path(workdir)
    c = ml_collections.ConfigDict(json.loads((workdir / CONFIG_FILE).read_text()))
    c.eval.tasks = tasks or c.eval.tasks
    c.eval.num_problems = num_problems or c.eval.num_problems
    c.eval.n_samples = n_samples or c.eval.n_samples
    specs = evaluate.eval_tasks(c)
    models = {"base": base_dir(c, workdir)}
    for name in stage_names(c):
        if (workdir / "stages" / name / DONE_FILE).is_file():
            models[name] = str(workdir / "stages" / name / "export")
    evals = {m: evaluate.cached_evaluation(workdir, m, d, specs, c.eval) for m, d in models.items()}
    e = c.eval
    head = f"{e.split} split, {e.num_problems} problems, n = {e.n_samples} at T = {e.temperature}"
    text = f"Held-out pass@k (%), {head}:\n\n" + evaluate.results_table(evals, e.n_samples)
    per_domain = evaluate.domain_table(evals)
    return text + (f"\nPer domain (mixture tasks):\n\n{per_domain}" if per_domain else "")
