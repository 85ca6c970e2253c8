"""Pipeline configs: named stages that run one after another in one workdir.

  c = pipeline_config()                      # the base model and the evaluation
  opd = add_stage(c, "opd", "opd")           # its run config is opd.run.* (an RL config)
  opd.switch.patience = 3                    # end it on a validation plateau
  rl = add_stage(c, "rl", "rl")              # starts from opd's export

Fields (`c.*`):
  order: the stage names, comma-separated, in run order (add_stage appends).
  model: the base θ_0, as an RL config's `model` (source warm_start / pretrained /
    random); the first stage starts from it.
  eval: what the pipeline evaluates before the first stage and after every stage
    (pass@k for every k ≤ n_samples, per task of `eval.tasks`).
  stages.<name>: one stage:
    kind: one of `stages.KINDS` (sft, dpo, opd, rl, merge).
    init: what it starts from: "" = the previous stage's export (the base for the
      first), "base", or an earlier stage's name.
    switch: metric, delta (δ), patience (k): end the stage as soon as its
      validation `metric` gained no more than δ over its last k evaluations
      (`core.opd.opd_plateaued`; patience 0 = off). Kinds that train with the
      RL trainer only (opd, rl, dpo); their in-run evaluations are the series.
    run: the kind's own config (`stages.KINDS[kind].defaults()`).
String fields of a stage's run config may name another stage's export as
"stage:<name>" (e.g. a teacher path; "stage:base" is the base), resolved by
the pipeline.
"""

from __future__ import annotations

import json

import ml_collections

from rlvr_jax.pipeline import stages
from rlvr_jax.pipeline.graph import STAGE_REF_PREFIX, init_of, is_pipeline, stage_names, stage_refs

__all__ = [
    "STAGE_REF_PREFIX",
    "add_stage",
    "apply_pulse",
    "init_of",
    "is_pipeline",
    "pipeline_config",
    "stage_config",
    "stage_names",
    "stage_refs",
    "validate",
]


def pipeline_config() -> ml_collections.ConfigDict:
    """A pipeline with no stages yet, on the warm-start Countdown base; locked.

    Returns:
      The locked ConfigDict (add stages with `add_stage`).
    """
    c = ml_collections.ConfigDict()
    c.order = ""
    c.model = ml_collections.ConfigDict()
    c.model.source = "warm_start"  # as rl.config: warm_start / pretrained / random
    c.model.domain = "countdown"
    c.model.role = "base"
    c.model.path = ""
    c.model.random_size = "tiny"
    c.model.seed = 0  # random: the init seed
    c.eval = ml_collections.ConfigDict()
    c.eval.enabled = True
    # JSON object {label: {"name": task, "options": {...}}}; "" = the base's warm-start
    # domain with its warm-start options, labelled by the domain.
    c.eval.tasks = ""
    c.eval.split = "test"
    c.eval.num_problems = 64
    c.eval.n_samples = 64  # n: pass@k is reported for every k = 1..n (the pass@k curves)
    c.eval.temperature = 1.0
    c.eval.max_new_tokens = 64
    c.eval.seed = 1
    c.stages = ml_collections.ConfigDict()
    c.lock()
    return c


def stage_config(kind: str) -> ml_collections.ConfigDict:
    """One stage of `kind` with the kind's default run config; locked."""
    s = ml_collections.ConfigDict()
    s.kind = kind
    s.init = ""
    s.switch = ml_collections.ConfigDict()
    s.switch.metric = "pass@1"  # an eval metric of the stage's run (its eval.split)
    s.switch.delta = 0.0  # δ: a gain must exceed this to count
    s.switch.patience = 0  # k: evaluations without such a gain (0 = never switch)
    s.run = stages.kind(kind).defaults()
    s.lock()
    return s


def add_stage(
    c: ml_collections.ConfigDict, name: str, kind: str, *, init: str = ""
) -> ml_collections.ConfigDict:
    """Appends stage `name` of `kind` to pipeline `c` and returns its (locked) config.

    Args:
      c: a pipeline config.
      name: a new stage name (letters, digits, "_").
      kind: a stage kind.
      init: "" (the previous stage's export), "base" or an earlier stage's name.
    Returns:
      `c.stages[name]`, to be filled in.
    """
    if not name.replace("_", "").isalnum() or name == "base":
        raise ValueError(f"stage name {name!r}: use letters, digits and '_' (not 'base')")
    if name in c.stages:
        raise ValueError(f"stage {name!r} is already in the pipeline")
    stage = stage_config(kind)
    stage.init = init
    with c.unlocked():
        c.stages[name] = stage
        c.order = ",".join([*stage_names(c), name])
    return stage


def apply_pulse(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Shrinks a pipeline to a CI pulse (in place): a tiny random base, each stage's pulse.

    Every stage gets its kind's pulse settings (RL kinds: `rl.config`'s "pulse"
    variant, arithmetic prompts; a warm-start teacher becomes the policy under
    the reference-solution context); the evaluation is 4 arithmetic problems x 4
    samples. Set task fields after this call to keep other tasks.

    Returns:
      `c`, for chaining.
    """
    c.model.source = "random"
    c.eval.tasks = json.dumps({"arithmetic": {"name": "arithmetic", "options": {}}})
    c.eval.num_problems, c.eval.n_samples, c.eval.max_new_tokens = 4, 4, 16
    for name in stage_names(c):
        s = c.stages[name]
        stages.kind(s.kind).pulse(s.run)
    return c


def validate(c: ml_collections.ConfigDict) -> None:
    """Checks the stage graph and each stage's fields; ValueError naming the field."""
    names = stage_names(c)
    if not names:
        raise ValueError("config.order names no stage; add stages with add_stage")
    if len(set(names)) != len(names):
        raise ValueError(f"config.order = {c.order!r} repeats a stage")
    missing = [n for n in names if n not in c.stages]
    extra = [n for n in c.stages if n not in names]
    if missing or extra:
        raise ValueError(
            f"config.order = {c.order!r} and config.stages ({sorted(c.stages)}) disagree: "
            f"missing {missing}, not in order {extra}"
        )
    for i, name in enumerate(names):
        s = c.stages[name]
        where = f"config.stages.{name}"
        kind = stages.kind(s.kind, field=f"{where}.kind")
        init = init_of(c, name)
        earlier = ["base", *names[:i]]
        if init not in earlier:
            raise ValueError(f"{where}.init = {s.init!r}; valid: '', {', '.join(earlier)}")
        for field, value in _string_leaves(s.run, f"{where}.run"):
            for ref in stage_refs(value):
                if ref not in earlier:
                    raise ValueError(
                        f"{field} = {value!r} refers to stage {ref!r}; it must name an "
                        f"earlier stage ({', '.join(names[:i]) or 'none'})"
                    )
        if s.switch.patience < 0:
            raise ValueError(f"{where}.switch.patience = {s.switch.patience}; must be >= 0")
        if s.switch.patience and not kind.switchable:
            raise ValueError(
                f"{where}.switch.patience = {s.switch.patience}: kind {s.kind!r} has no "
                "in-run evaluations to switch on (kinds that do: opd, rl, dpo)"
            )
        if s.switch.patience and s.run.eval.every < 1:
            raise ValueError(
                f"{where}.switch.patience = {s.switch.patience} needs in-run evaluations: "
                f"set {where}.run.eval.every > 0"
            )
        kind.check(s.run, where=f"{where}.run", earlier=names[:i])
    if c.eval.n_samples < 1 or c.eval.num_problems < 1:
        raise ValueError(
            f"config.eval.n_samples = {c.eval.n_samples}, config.eval.num_problems = "
            f"{c.eval.num_problems}; both must be >= 1"
        )


def _string_leaves(d: ml_collections.ConfigDict, prefix: str):
    for key, value in d.items():
        if isinstance(value, ml_collections.ConfigDict):
            yield from _string_leaves(value, f"{prefix}.{key}")
        elif isinstance(value, str):
            yield f"{prefix}.{key}", value
