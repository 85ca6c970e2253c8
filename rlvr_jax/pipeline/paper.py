"""The `:paper` variant of a pipeline: every trainable stage at the paper's model and scale.

`apply(c, model, teacher=..., task=...)` turns a pipeline config (built at its
file's default scale) into its paper-scale form, in place:

  base      the pretrained `model` at its placeholder path (`rl.paper_scale.model_path`;
            override via --config.model.path).
  rl, opd,  `rl.paper_scale.apply` on the stage's run config: the shared block's
  dpo       mesh (1, chips, 1) on fsdp, f32 master weights and bf16 compute, splash
            attention, scanned layers and block remat, batch, optimizer, N, in-run
            evaluations; the stage keeps its method fields, its step budget
            (`train.steps`: the file's paper budget) and its evaluation split and
            start (a switch's series). A warm-start teacher reads `teacher`.
  dpo       also: one pair per prompt and as many prompts per step as chips, so the
            step's pairs (2 rows each: the DPO update has no micro-batches) are
            2 rows per chip (ours).
  sft       the same mesh and execution (`pipeline.execution`), one example per chip
            per step (batch_size = chips), lr 1e-5 (ours), teacher samples of N new
            tokens from `teacher`'s checkpoint.
  merge     nothing: it runs on the host, one tensor at a time (`pipeline.merge`).
  eval      the pipeline's evaluation of each export: 500 problems x 16 samples of N
            tokens at T = 1, on the stages' task when `task` = "math_file".

Returns `c`; the RL-kind stages' `model` fields are replaced by each stage's start
checkpoint when the pipeline runs (`rl_stage.resolve_rl`).
"""

from __future__ import annotations

import json

import ml_collections

from rlvr_jax.pipeline import execution
from rlvr_jax.pipeline.config import stage_names
from rlvr_jax.pipeline.stage_kind import rl_defaults
from rlvr_jax.rl import paper_scale

SFT_LR = 1e-5  # ours: a full fine-tune's usual peak lr at this size
KEPT = ("train.steps", "eval.split", "eval.at_start")  # a stage's own choices


def apply(
    c: ml_collections.ConfigDict,
    model: str = "qwen3-8b",
    *,
    teacher: str = "",
    task: str | None = "math_file",
) -> ml_collections.ConfigDict:
    """Sets the paper-scale form of pipeline `c` (module docstring), in place.

    Args:
      c: a pipeline config.
      model: a `models.presets` name with a `rl.paper_scale.CHECKPOINTS` entry.
      teacher: a checkpoint directory name ("Qwen3-32B") that every warm-start teacher
        (RL teacher signals, SFT data teachers) reads from "/path/to/<teacher>".
      task: "math_file" (every stage and the evaluation on the user-given math data
        file) or None (keep each stage's task and `c.eval.tasks`).
    Returns:
      `c`, for chaining.
    """
    chips = paper_scale.chips_for(model)
    c.model.source, c.model.path = "pretrained", paper_scale.model_path(model)
    n = 0
    for name in stage_names(c):
        s = c.stages[name]
        if s.kind in execution.TRAINER_KINDS:
            kept = {f: s.run[f.split(".")[0]][f.split(".")[1]] for f in KEPT}
            paper_scale.apply(s.run, model, task=task, teacher=teacher)
            for field, value in kept.items():
                a, b = field.split(".")
                s.run[a][b] = value
            if s.kind == "dpo":
                s.run.dpo.pairs_per_group = 1
                s.run.data.prompts_per_step = chips
            n = s.run.rollout.max_new_tokens
        elif s.kind == "sft":
            _sft(s.run, model, chips, teacher, task)
    for name in stage_names(c):  # SFT samples as many new tokens as the RL stages
        if c.stages[name].kind == "sft" and n:
            c.stages[name].run.data.max_new_tokens = n
    e = c.eval
    e.num_problems, e.n_samples, e.temperature = 500, 16, 1.0
    e.max_new_tokens = n or paper_scale.apply(_rl_defaults(), model).rollout.max_new_tokens
    if task == "math_file":
        e.tasks = json.dumps({"math": {"name": "math_file", "options": _math_options()}})
    return c


def _sft(run, model: str, chips: int, teacher: str, task: str | None) -> None:
    shape = paper_scale.apply(_rl_defaults(), model)  # the shared block's execution fields
    execution.add_execution(run)
    run.mesh.shape, run.mesh.rules = tuple(shape.mesh.shape), shape.mesh.rules
    for field in execution.EXECUTION_FIELDS:
        run.model[field] = shape.model[field]
    run.data.max_new_tokens = shape.rollout.max_new_tokens
    run.train.batch_size = chips  # one example per chip per step (ours)
    run.train.lr = SFT_LR
    run.eval.num_problems, run.eval.n_samples = 500, 16
    if task == "math_file":
        run.task.name, run.task.options = "math_file", json.dumps(_math_options())
    t = run.data.teacher
    if run.data.source == "teacher" and t.source == "warm_start":
        if not teacher:
            raise ValueError(
                "an SFT stage on a warm-start teacher needs a teacher checkpoint at paper "
                "scale: pipeline.paper.apply(c, ..., teacher='<checkpoint name>')"
            )
        t.source, t.path = "pretrained", f"/path/to/{teacher}"


def _math_options() -> dict:
    return {"path": paper_scale.DATA_PATH, "checker": "math_verify"}


def _rl_defaults():
    return rl_defaults()
