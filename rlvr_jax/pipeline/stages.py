"""Stage kinds of a pipeline: what each runs, from which export, and when it ends.

Every stage runs in its own directory `<workdir>/stages/<name>/` as one run
(config.json, metrics.jsonl, checkpoints, results.md, export/): it starts from
an HF checkpoint directory (`StageContext.init_dir`: the base or an earlier
stage's export), checkpoints and resumes like a single run, and ends by writing
its export. Kinds:

  rl     the RL trainer (`rl.trainer.Trainer`), run config = an RL config
  opd    the same with on-policy distillation as the credit: the teacher signal
         and the plain OPD advantage ℓ^T − ℓ^S (opdvr, gate "none", no RL term)
  dpo    DPO on verified pairs of the current policy's rollouts (`pipeline.dpo`)
  sft    supervised fine-tuning on reference solutions or a teacher's verified
         samples (`pipeline.sft`)
  merge  task vectors of earlier stages merged into one checkpoint (`pipeline.merge`)

The trainer kinds (rl, opd, dpo) can end early on a rule evaluated in-run:
`PlateauSwitch`, the stage's `switch` fields (Sequential-beats-Joint's OPD → RL
hand-over when the OPD validation score plateaus).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections

from rlvr_jax.core.opd import opd_plateaued
from rlvr_jax.pipeline.config import STAGE_REF_PREFIX, stage_refs


@dataclasses.dataclass
class StageContext:
    """What a stage runner gets.

    Attributes:
      name, kind: the stage's name and kind.
      config: its run config, resolved (start checkpoint, task options, stage refs).
      switch: its `switch` fields (metric, delta, patience).
      workdir: its directory.
      init_dir: the HF checkpoint directory it starts from.
      exports: "base" and every earlier stage -> its export directory.
      base: the pipeline's base `model` fields (domain, source, ...).
      allow_config_change: run-config fields a resume of this stage may change.
    """

    name: str
    kind: str
    config: ml_collections.ConfigDict
    switch: ml_collections.ConfigDict
    workdir: Path
    init_dir: str
    exports: dict[str, str]
    base: ml_collections.ConfigDict
    allow_config_change: tuple[str, ...] = ()

    @property
    def export_dir(self) -> Path:
        return self.workdir / "export"


@dataclasses.dataclass(frozen=True)
class Kind:
    """A stage kind: its default run config, its checks, how it resolves and runs.

    Attributes:
      defaults: () -> the kind's default run config (locked).
      run: (StageContext) -> result dict (final metrics; {"preempted": True, ...}
        when a signal stopped it before the end).
      check: (run config, where, earlier stage names) -> None; ValueError naming
        `where`.<field>.
      resolve: (run config copy, init_dir, base model fields) -> None: points the
        run at its start checkpoint (in place).
      pulse: (run config) -> None: shrinks it to a seconds-long CI run (in place).
      switchable: whether `switch` applies (the kind evaluates in-run).
    """

    defaults: Callable[[], ml_collections.ConfigDict]
    run: Callable[[StageContext], dict[str, Any]]
    check: Callable[..., None]
    resolve: Callable[..., None]
    pulse: Callable[[ml_collections.ConfigDict], None]
    switchable: bool = False


def kind(name: str, *, field: str = "kind") -> Kind:
    """The stage kind `name`; ValueError listing the valid kinds."""
    kinds = _kinds()
    if name not in kinds:
        raise ValueError(f"{field} = {name!r}; valid: {', '.join(sorted(kinds))}")
    return kinds[name]


def resolve(
    run: ml_collections.ConfigDict, k: Kind, init_dir: str, exports: dict, base
) -> ml_collections.ConfigDict:
    """A copy of a stage's run config pointed at its start and with "stage:<name>" resolved."""
    out = copy.deepcopy(run)
    _replace_refs(out, exports)
    k.resolve(out, init_dir, base)
    return out


def _replace_refs(d: ml_collections.ConfigDict, exports: dict[str, str]) -> None:
    for key, value in d.items():
        if isinstance(value, ml_collections.ConfigDict):
            _replace_refs(value, exports)
        elif isinstance(value, str) and stage_refs(value):
            for ref in stage_refs(value):
                value = value.replace(STAGE_REF_PREFIX + ref, exports[ref])
            d[key] = value


# ------------------------------------------------------------------ trainer kinds
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
        from rlvr_jax.run.report import read_metrics

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
        from rlvr_jax import distributed

        mine = distributed.is_logging_process() and opd_plateaued(
            self.scores(), delta=self.delta, patience=self.patience
        )
        return distributed.allgather_objects(mine)[0]


def rl_defaults() -> ml_collections.ConfigDict:
    """The RL config defaults, without in-run evaluations: the pipeline evaluates each export.

    (A stage with a switch needs them back: eval.every > 0, and eval.at_start for
    the score before training.)
    """
    from rlvr_jax.rl.config import default_config

    c = default_config()
    c.eval.at_start = False
    c.eval.every = 0
    return c


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
    from rlvr_jax.rl.config import SOLUTION_VIEW, apply_variant

    apply_variant(run, "pulse")
    run.eval.at_start = False
    if run.score.teacher.source == "warm_start":  # a random base has no trained teacher
        run.score.teacher.source, run.score.teacher.template = "hint", SOLUTION_VIEW


def check_rl(run, *, where: str, earlier) -> None:
    from rlvr_jax.rl.config import validate

    del earlier
    try:
        validate(run)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if not run.checkpoint.export_final:
        raise ValueError(f"{where}.checkpoint.export_final must be True: the next stage needs it")


def task_options(name: str, options: str, base) -> str:
    """A stage's task options: as given, else the base's warm-start options for its domain."""
    from rlvr_jax.train.warmstart import TASK_OPTIONS

    if options or base.source != "warm_start" or name != base.domain:
        return options
    return json.dumps(TASK_OPTIONS.get(base.domain, {}), sort_keys=True)


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
    if ctx.kind == "dpo":
        from rlvr_jax.pipeline.dpo import DPOTrainer as trainer_cls
    else:
        from rlvr_jax.rl.trainer import Trainer as trainer_cls

    trainer = trainer_cls(ctx.config, ctx.workdir, ctx.allow_config_change)
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


SPREAD_RULES = "fsdp"  # the sharding rules of `spread` (a preset of rlvr_jax.sharding)


def spread(model):
    """In a multi-process run, shards `model` over every device of every process (fsdp).

    The SFT stage and the evaluation (which are not RL configs with a
    `mesh` of their own) run on this mesh, so the sampler and the updates are
    SPMD programs over all hosts. A single-process run leaves the model as loaded.

    Returns:
      The mesh (None in a single-process run).
    """
    import jax

    if jax.process_count() == 1:
        return None
    from flax import nnx

    from rlvr_jax import sharding

    mesh = sharding.make_mesh((1, -1, 1), jax.devices())
    nnx.update(model, sharding.shard_state(nnx.state(model), mesh, SPREAD_RULES))
    return mesh


# --------------------------------------------------------------------- merge kind
def merge_defaults() -> ml_collections.ConfigDict:
    from rlvr_jax.pipeline.merge import MERGES

    c = ml_collections.ConfigDict()
    c.method = "task_arithmetic"  # a name in pipeline.merge.MERGES
    c.specialists = ""  # earlier stage names, comma-separated: θ_1..θ_n (θ_0 = the init)
    c.lambdas = ""  # λ_1..λ_n, comma-separated ("" = 1/n each)
    for name in MERGES.names():
        c[name] = ml_collections.ConfigDict(dict(MERGES.get(name).defaults))
    c.lock()
    return c


def _names(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def merge_lambdas(run) -> tuple[float, ...]:
    """λ per specialist (1/n each when `lambdas` is empty)."""
    specs = _names(run.specialists)
    if not run.lambdas:
        return tuple(1.0 / len(specs) for _ in specs)
    return tuple(float(x) for x in _names(run.lambdas))


def check_merge(run, *, where: str, earlier) -> None:
    from rlvr_jax.pipeline.merge import MERGES

    if run.method not in MERGES:
        raise ValueError(f"{where}.method = {run.method!r}; valid: {', '.join(MERGES.names())}")
    specs = _names(run.specialists)
    bad = [s for s in specs if s not in earlier]
    if not specs or bad:
        raise ValueError(
            f"{where}.specialists = {run.specialists!r}: name earlier stages "
            f"({', '.join(earlier) or 'none'})"
        )
    try:
        lambdas = merge_lambdas(run)
    except ValueError:
        raise ValueError(f"{where}.lambdas = {run.lambdas!r} is not a list of numbers") from None
    if len(lambdas) != len(specs):
        raise ValueError(f"{where}.lambdas = {run.lambdas!r}: one λ per specialist ({len(specs)})")


def run_merge(ctx: StageContext) -> dict[str, Any]:
    from rlvr_jax import distributed
    from rlvr_jax.pipeline.merge import merge_checkpoints

    c = ctx.config
    specs = _names(c.specialists)
    lambdas = merge_lambdas(c)
    # Process 0 merges on the host, one tensor at a time, and writes it; the others
    # check the specialists against the base.
    write = distributed.is_logging_process()
    if write:
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        (ctx.workdir / "config.json").write_text(c.to_json(indent=2, sort_keys=True))
    merge_checkpoints(
        ctx.init_dir,
        [ctx.exports[s] for s in specs],
        lambdas,
        ctx.export_dir if write else None,
        method=c.method,
        hparams=c[c.method].to_dict(),
    )
    return {"method": c.method, "specialists": ",".join(specs), "lambdas": str(list(lambdas))}


def _nothing(*args) -> None:
    del args


def _kinds() -> dict[str, Kind]:
    from rlvr_jax.pipeline import dpo, sft

    trainer = dict(
        run=run_trainer, check=check_rl, resolve=resolve_rl, pulse=pulse_rl, switchable=True
    )
    return {
        "rl": Kind(defaults=rl_defaults, **trainer),
        "opd": Kind(defaults=opd_defaults, **trainer),
        "dpo": Kind(defaults=dpo.dpo_config, **trainer),
        "sft": Kind(
            defaults=sft.sft_config,
            run=sft.run_sft,
            check=sft.check,
            resolve=sft.resolve,
            pulse=sft.pulse,
        ),
        "merge": Kind(
            defaults=merge_defaults,
            run=run_merge,
            check=check_merge,
            resolve=_nothing,
            pulse=_nothing,
        ),
    }
