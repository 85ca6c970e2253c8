"""What a miniature reproduction declares (`experiments/<slug>/repro.py`).

A paper's headline comparison is a list of arms (experiment configs, each with a
few overrides), the metrics read from each run's `metrics.jsonl`, and the
paper's claims: which arm should beat which on which metric, in which direction.

  def get_reproduction() -> Reproduction:
      return Reproduction(
          slug="sara", paper="Early Verdicts, Better Budgets (SARA)",
          arms=(Arm("ds", "baselines/grpo.py", {"select.name": "dynamic_sampling"}),
                Arm("sara", "sara/sara.py")),
          baseline="ds",
          metrics=(PASS_1, PASS_K, ROLLOUTS),
          claims=(Claim("SARA needs 22% fewer rollouts than DS", "rollouts", "sara", "ds",
                        "lower", paper="-22%"),),
          shrunk="...", tuning="...")

Every override is a config field path (as on the command line, without the
`--config.` prefix). `Reproduction.common` holds the overrides every arm gets
(the miniature's shrinkage); an arm's own overrides win. Two arms of any two
reproductions that resolve to the same config and seed are the same run.
A coefficient that must be chosen (the weight of a dense teacher term added to an
outcome advantage) is declared as a `Sweep` of its arm, and of the baseline it is
compared with: the harness runs each value, evaluates it on the task's validation
split, and runs the arm with the best one (`rlvr_jax.repro.sweeps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

DIRECTIONS = ("higher", "lower", "within", "at_most")
MARGINED = ("within", "at_most")  # directions that take a margin
ROLES = ("method", "baseline", "ablation")
# How a metric's per-run value is read from metrics.jsonl (see rlvr_jax.repro.metrics).
REDUCTIONS = (
    "initial",
    "final",
    "gain",
    "sum",
    "mean",
    "last",
    "rollouts",
    "tokens",
    "effective_per_1k",
    "rollouts_to",
    "stage_steps",
)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm of the comparison: an experiment config plus overrides.

    Attributes:
      name: the label in tables and plots ("grpo", "sara").
      config: the experiment file under `experiments/`, with an optional
        `:variant` suffix ("sara/sara.py", "baselines/grpo.py:arithmetic").
      overrides: config field path -> value, applied after `Reproduction.common`.
      role: "method", "baseline" or "ablation" (how the page describes it).
      note: one line on what the arm is (shown in the page's arm list).
      baseline: the arm its Δ columns are taken against ("" = the page's baseline;
        its own name = it is a baseline itself): arms on another task than the
        page's baseline (CBPO's tool-episode arms) compare with their own.
      stage: for a pipeline config, the stage whose export's evaluation is the
        arm's final one ("" = the last stage); arms naming stages of the same
        pipeline config share its run (`rlvr_jax.repro.pipelines`).
    """

    name: str
    config: str
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    role: str = "method"
    note: str = ""
    baseline: str = ""
    stage: str = ""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"arm {self.name!r}: role {self.role!r}; valid: {', '.join(ROLES)}")


@dataclasses.dataclass(frozen=True)
class Metric:
    """A per-run number read from the run's metrics.jsonl.

    Attributes:
      name: the column label (and the name claims refer to).
      key: the metrics.jsonl key ("pass@1", "select/rollouts", "clip_high_frac").
      reduce: "final" (the last eval record's value), "initial" (the step-0 eval's:
        the policy before RL), "gain" (final minus initial: what RL added in
        this run), "sum" / "mean" / "last" over
        the train records that have the key, "rollouts" (rollouts generated over
        the run), "tokens" (response tokens generated over the run),
        "effective_per_1k" (groups with reward variance > 0 per 1000 rollouts), or
        "rollouts_to" (rollouts generated until the eval value of `key` first
        reaches `target`; NaN if it never does), or "stage_steps" (train steps of
        the pipeline stage named `key`: 0 when the pipeline has no such stage, NaN
        for a run that is not a pipeline).
      scale: display factor (100 for percent).
      fmt: display format of a scaled value.
      target: the threshold of "rollouts_to".
      doc: what the number is, one line (the page's metric list).
    """

    name: str
    key: str
    reduce: str = "final"
    scale: float = 1.0
    fmt: str = "{:.3f}"
    target: float | None = None
    doc: str = ""

    def __post_init__(self):
        if self.reduce not in REDUCTIONS:
            raise ValueError(
                f"metric {self.name!r}: reduce {self.reduce!r}; valid: {', '.join(REDUCTIONS)}"
            )
        if (self.reduce == "rollouts_to") != (self.target is not None):
            raise ValueError(f"metric {self.name!r}: a target goes with reduce 'rollouts_to' only")


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim of the paper, as a directional comparison of two arms on one metric.

    Attributes:
      text: the claim in words (from the abstract).
      metric: a `Metric.name` of the reproduction.
      arm: the arm that should win.
      baseline: the arm it is compared with.
      direction: "higher" (arm's mean above the baseline's), "lower", "within"
        (the two means differ by at most `margin`: an equivalence claim), or
        "at_most" (the arm exceeds the baseline by at most `margin`: a bounded cost,
        e.g. "< 9% overhead").
      paper: the paper's number, where the abstract gives one ("" if none).
      margin: a "within" / "at_most" claim's bound, in the metric's unscaled units,
        or as a fraction of the baseline's mean with `relative`.
      relative: the margin is a fraction of |mean(baseline)| (0.09 = 9%).
      exercised: a metric of the reproduction that counts the method's precondition
        in the arm's runs (groups rescued, guided rows that passed, switches fired);
        when its mean over the arm's finished seeds is not > 0 the verdict is
        "setup did not exercise the method" with the logged value ("" = no check).
    """

    text: str
    metric: str
    arm: str
    baseline: str
    direction: str
    paper: str = ""
    margin: float = 0.0
    relative: bool = False
    exercised: str = ""

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"claim {self.text[:40]!r}: direction {self.direction!r}; valid: {DIRECTIONS}"
            )
        if (self.direction in MARGINED) != (self.margin > 0) or (
            self.relative and self.direction not in MARGINED
        ):
            raise ValueError(
                f"claim {self.text[:40]!r}: a positive margin goes with directions {MARGINED} "
                f"only (direction {self.direction!r}, margin {self.margin}, relative "
                f"{self.relative})"
            )

    def bound(self, baseline_mean: float) -> float:
        """The margin in the metric's units (a relative one scaled by |baseline mean|)."""
        return self.margin * abs(baseline_mean) if self.relative else self.margin


def _stage_prefix(path: str) -> str:
    """The prefix "stages.<name>.run." of a pipeline stage's config path, else ""."""
    parts = path.split(".")
    in_stage = len(parts) > 3 and parts[0] == "stages" and parts[2] == "run"
    return ".".join(parts[:3]) + "." if in_stage else ""


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A coefficient of one arm chosen on the validation split, never the test split.

    Each value in `values` is a run of the arm with `field` set to it, for each seed
    of `seeds`, that also evaluates `validation_problems` problems of the task's
    validation split after its last step (`eval.validation_problems`). The value with
    the highest mean validation `metric` (the first in `values` on a tie) is the
    arm's: its seeds run with it, so the sweep's run of the chosen value at a seed
    the page uses is that seed's run of the arm. The page records every value's
    result. A method and the baseline it is compared with get the same sweep (same
    values and seeds; `Reproduction` checks it).

    Attributes:
      arm: the arm's name.
      field: the config field path of the coefficient ("credit.rstg.coef"); several
        paths joined by commas are one coefficient set in each (CPO's λ on correct and
        on wrong rows: "credit.cpo.lam_correct,credit.cpo.lam_wrong"). In a pipeline
        arm, a stage's field ("stages.<name>.run.credit…"): that stage evaluates the
        validation split, and its value is the arm's (all paths in one stage).
      values: the candidates, in the order the page lists them.
      seeds: the seeds each value runs with.
      metric: the eval key compared on the validation split ("pass@1").
      validation_problems: how many validation problems each run evaluates.
    """

    arm: str
    field: str
    values: tuple[float, ...]
    seeds: tuple[int, ...] = (0,)
    metric: str = "pass@1"
    validation_problems: int = 256

    def __post_init__(self):
        if len(self.values) < 2 or len(set(self.values)) != len(self.values) or not self.seeds:
            raise ValueError(
                f"sweep of arm {self.arm!r}: values {self.values} must be >= 2 distinct values "
                f"and seeds {self.seeds} not empty"
            )
        if not all(self.fields) or len(set(self.fields)) != len(self.fields):
            raise ValueError(f"sweep of arm {self.arm!r}: field {self.field!r} names an empty "
                             "or repeated path")  # fmt: skip
        if self.validation_problems < 1:
            raise ValueError(
                f"sweep of arm {self.arm!r}: validation_problems = {self.validation_problems}; "
                "must be >= 1"
            )
        if len({_stage_prefix(f) for f in self.fields}) > 1:
            raise ValueError(
                f"sweep of arm {self.arm!r}: field {self.field!r} names several pipeline "
                "stages; a sweep's paths lie in one stage (or in none)"
            )

    @property
    def stage(self) -> str:
        """The prefix "stages.<name>.run." when the field is a pipeline stage's, else ""."""
        return _stage_prefix(self.fields[0])

    @property
    def fields(self) -> tuple[str, ...]:
        """The config paths set to each value (`field` split at commas)."""
        return tuple(f.strip() for f in self.field.split(","))

    def same_design(self, other: Sweep) -> bool:
        """Same values, seeds, metric and validation size (the field may differ)."""
        keys = ("values", "seeds", "metric", "validation_problems")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """A paper's headline comparison in miniature.

    Attributes:
      slug: the experiment directory (`experiments/<slug>/`).
      paper: the paper's title.
      arms: the arms, method first by convention.
      baseline: the arm every Δ column of the page is taken against.
      metrics: the per-run numbers shown (held-out pass@1 / pass@k and the
        method's own quantity).
      claims: the paper's claims; the first is the headline (its verdict is the
        page's). Empty for a reference table that is no paper's (the baselines).
      common: overrides every arm gets (the miniature's shrinkage).
      shrunk: what is smaller than in the paper, in words.
      tuning: how the hyperparameters were chosen (never on the evaluation problems).
      notes: anything else the page must say (known differences from the paper).
      sweeps: coefficients chosen on the validation split, one `Sweep` per arm at
        most, all with the same design (`rlvr_jax.repro.sweeps`).
    """

    slug: str
    paper: str
    arms: tuple[Arm, ...]
    baseline: str
    metrics: tuple[Metric, ...]
    claims: tuple[Claim, ...]
    common: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    shrunk: str = ""
    tuning: str = ""
    notes: str = ""
    sweeps: tuple[Sweep, ...] = ()

    def __post_init__(self):
        names = [a.name for a in self.arms]
        where = f"reproduction {self.slug!r}"
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: arm names repeat: {names}")
        metric_names = [m.name for m in self.metrics]
        if len(set(metric_names)) != len(metric_names):
            raise ValueError(f"{where}: metric names repeat: {metric_names}")
        if self.baseline not in names:
            raise ValueError(f"{where}: baseline {self.baseline!r} is not an arm; arms: {names}")
        for a in self.arms:
            if a.baseline and a.baseline not in names:
                raise ValueError(f"{where}: arm {a.name!r} baseline {a.baseline!r}; arms: {names}")
        for c in self.claims:
            for arm in (c.arm, c.baseline):
                if arm not in names:
                    raise ValueError(f"{where}: claim names arm {arm!r}; arms: {names}")
            for field, metric in (("metric", c.metric), ("exercised", c.exercised)):
                if metric and metric not in metric_names:
                    raise ValueError(
                        f"{where}: claim {c.text[:40]!r} {field} names metric {metric!r}; "
                        f"metrics: {metric_names}"
                    )

        swept = [s.arm for s in self.sweeps]
        for s in self.sweeps:
            if s.arm not in names:
                raise ValueError(f"{where}: sweep of arm {s.arm!r}; arms: {names}")
            if not s.same_design(self.sweeps[0]):
                raise ValueError(
                    f"{where}: the sweep of arm {s.arm!r} differs from that of "
                    f"{self.sweeps[0].arm!r} in values, seeds, metric or size: every swept arm "
                    "gets the same sweep"
                )
        if len(set(swept)) != len(swept):
            raise ValueError(f"{where}: an arm has two sweeps: {swept}")

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def reference(self, arm: Arm) -> str:
        """The arm `arm`'s Δ columns are taken against."""
        return arm.baseline or self.baseline

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)
