"""The trainer stage kinds: rl (the RL trainer) and opd (plain on-policy distillation).

Both run `rl.trainer.Trainer` on an RL run config (dpo runs the same loop with
`pipeline.dpo`'s trainer); they can end early on `PlateauSwitch`, the stage's
`switch` fields (Sequential-beats-Joint's OPD → RL hand-over when the OPD
validation score plateaus).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import ml_collections

from rlvr_jax import distributed
from rlvr_jax.core.opd import opd_plateaued
from rlvr_jax.pipeline.dpo import dpo_trainer
from rlvr_jax.pipeline.stage_kind import StageContext, rl_defaults, task_options
from rlvr_jax.rl.config import SOLUTION_VIEW, apply_variant, validate
from rlvr_jax.rl.trainer import Trainer
from rlvr_jax.run.metrics_file import read_metrics


@dataclasses.dataclass
class PlateauSwitch:
    """The in-run switch rule: the stage's validation `metric` plateaued.

    Reads the run's evaluations from its metrics.jsonl (a step evaluated twice
    counts once, its last record) and asks `core.opd.opd_plateaued`: no score in
    the last `patience` evaluations beats the best before them by more than
    `delta`. Every evaluation of the run counts, the one before training (step 0)
    included.
    """

    metrics_path: Path
    metric: str
    delta: float
    patience: int

    def scores(self) -> list[float]:
        if not Path(self.metrics_path).is_file():
            return []
        by_step = {r["step"]: r for r in read_metrics(self.metrics_path) if r["split"] == "eval"}
        rows = [by_step[s] for s in sorted(by_step)]
        for r in rows:
            if self.metric not in r:
                valid = sorted(k for k in r if k not in ("step", "split", "time"))
                raise ValueError(
                    f"switch.metric = {self.metric!r} is not an eval metric of "
                    f"{self.metrics_path}; valid: {valid}"
                )
        return [float(r[self.metric]) for r in rows]

    def __call__(self) -> bool:
        """Process 0 reads its metrics file and decides; every process gets its answer."""
        mine = distributed.is_logging_process() and opd_plateaued(
            self.scores(), delta=self.delta, patience=self.patience
        )
        return distributed.allgather_objects(mine)[0]


def opd_defaults() -> ml_collections.ConfigDict:
    """An RL config whose credit is plain sampled-token OPD: A_t = ℓ^T_t − ℓ^S_t.

    The teacher signal with the warm-start teacher of the base's domain; the
    advantage estimator's output is replaced (opdvr with gate "none", rl_coef 0).
    Its evaluations (when a switch asks for them) use the validation split.
    """
    c = rl_defaults()
    c.score.signals = "teacher"
    c.score.teacher.source, c.score.teacher.role = "warm_start", "teacher"
    c.credit.transforms = "opdvr"
    c.credit.opdvr.gate = "none"
    c.credit.opdvr.rl_coef = 0.0
    c.eval.split = "validation"
    return c


def pulse_rl(run) -> None:
    """The RL configs' "pulse" variant: a tiny batch, 2 steps, arithmetic prompts."""
    apply_variant(run, "pulse")
    run.eval.at_start = False
    if run.score.teacher.source == "warm_start":  # a random base has no trained teacher
        run.score.teacher.source, run.score.teacher.template = "hint", SOLUTION_VIEW


def check_rl(run, *, where: str, earlier) -> None:
    del earlier
    try:
        validate(run)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if not run.checkpoint.export_final:
        raise ValueError(f"{where}.checkpoint.export_final must be True: the next stage needs it")


def _fill_teacher_domains(node, domain: str) -> None:
    """Sets every warm-start teacher's empty `domain` (any subtree with source + domain)."""
    for key in node.keys():
        child = node[key]
        if isinstance(child, ml_collections.ConfigDict):
            if {"source", "domain"} <= set(child.keys()) and child.source == "warm_start":
                if not child.domain:
                    child.domain = domain
            _fill_teacher_domains(child, domain)


def resolve_rl(run, init_dir: str, base) -> None:
    """The run starts from `init_dir`; an empty task.options gets the base's warm-start ones.

    A stage's model is a pretrained export, so the trainer cannot tell its
    warm-start domain: a warm-start teacher whose domain is "" ("the policy's")
    gets the base's domain here.
    """
    run.task.options = task_options(run.task.name, run.task.options, base)
    run.model.source, run.model.path = "pretrained", init_dir
    run.model.domain = base.domain
    if base.source == "warm_start":
        _fill_teacher_domains(run, base.domain)


def run_trainer(ctx: StageContext) -> dict[str, Any]:
    """Runs (or resumes) an rl / opd / dpo stage with its switch rule."""
    make = dpo_trainer if ctx.kind == "dpo" else Trainer.from_config
    trainer = make(ctx.config, ctx.workdir, ctx.allow_config_change)
    rule = None
    if ctx.switch.patience:
        sw = ctx.switch
        rule = PlateauSwitch(trainer.io.logger.path, sw.metric, sw.delta, sw.patience)
    try:
        result = trainer.run(stop_rule=rule)
        if not result.get("preempted"):
            result = dict(result, steps=int(trainer.io.latest_step() or 0))
    finally:
        trainer.io.close()
    return result
