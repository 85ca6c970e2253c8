"""A reproduction's measured results: per-run values, per-arm summaries, claim verdicts.

Pure data in, data out (the page writer formats it): `collect` reads the runs'
metrics, `arm_summaries` and `claim_results` reduce them over seeds.
"""

from __future__ import annotations

import dataclasses
import math

from rlvr_jax.repro import metrics as metrics_lib
from rlvr_jax.repro import pipelines
from rlvr_jax.repro.records import manifest_weights
from rlvr_jax.repro.runs import DONE, Run
from rlvr_jax.repro.spec import Claim, Reproduction
from rlvr_jax.repro.stats import (
    MIXED_WEIGHTS,
    NO_VERDICT,
    NOT_EXERCISED,
    Difference,
    Summary,
    verdict,
)
from rlvr_jax.run.metrics_file import read_metrics

# Curves every page plots: (split, key, title); split "cost" is the eval value against the
# rollouts generated so far (drawn for pages with a cost metric).
CURVES = (("eval", "pass@1", "held-out pass@1"), ("train", "reward", "train reward"))
COST = ("cost", "pass@1", "held-out pass@1 vs rollouts generated")
COST_REDUCTIONS = ("rollouts", "tokens", "rollouts_to", "effective_per_1k")


@dataclasses.dataclass
class RunResult:
    """A run and, when it finished, its metric values (unscaled) and curves."""

    run: Run
    values: dict[str, float] = dataclasses.field(default_factory=dict)
    before: float = math.nan  # held-out pass@1 at step 0 (the policy before RL)
    curves: dict[tuple[str, str], tuple[list[int], list[float]]] = dataclasses.field(
        default_factory=dict
    )

    @property
    def done(self) -> bool:
        return self.run.status == DONE


def curve_keys(repro: Reproduction) -> list[tuple[str, str, str]]:
    """The standard curves plus the per-step curve of each train-split metric."""
    out = list(CURVES)
    if any(m.reduce in COST_REDUCTIONS for m in repro.metrics):
        out.append(COST)
    for m in repro.metrics:
        if m.reduce in ("sum", "mean", "last") and ("train", m.key) not in [c[:2] for c in out]:
            out.append(("train", m.key, m.name))
    return out


def collect(repro: Reproduction, runs: list[Run]) -> list[RunResult]:
    """Reads every finished run's metrics (crashed / unfinished runs get no values)."""
    out = []
    for run in runs:
        result = RunResult(run)
        if result.done:
            records = read_metrics(run.workdir / "metrics.jsonl")
            if pipelines.is_pipeline(run.config):
                stage = run.arm.stage or pipelines.stage_names(run.config)[-1]
                records = pipelines.arm_records(records, stage)
            g = pipelines.group_size(run.config)
            result.values = {m.name: metrics_lib.metric_value(records, g, m) for m in repro.metrics}
            result.before = metrics_lib.metric_value(records, g, metrics_lib.PASS_1_BEFORE)
            result.curves = {
                (split, key): metrics_lib.cost_curve(records, g, key)
                if split == "cost"
                else metrics_lib.curve(records, split, key)
                for split, key, _ in curve_keys(repro)
            }
        out.append(result)
    return out


def arm_values(results: list[RunResult], arm: str, metric: str) -> list[float]:
    """The finished runs' values of `metric` in arm `arm`, by seed order."""
    return [r.values.get(metric, math.nan) for r in results if r.run.arm.name == arm and r.done]


def seed_values(results: list[RunResult], arm: str, metric: str) -> dict[int, float]:
    """seed -> the finished run's value of `metric` in arm `arm`."""
    return {
        r.run.seed: r.values.get(metric, math.nan)
        for r in results
        if r.run.arm.name == arm and r.done
    }


def paired_difference(results: list[RunResult], arm: str, base: str, metric: str):
    """The paired-by-seed Difference of `arm` − `base` (None with < 2 common seeds)."""
    a, b = seed_values(results, arm, metric), seed_values(results, base, metric)
    return Difference.paired([(a[s], b[s]) for s in sorted(set(a) & set(b))])


def arm_summaries(repro: Reproduction, results: list[RunResult]) -> dict[str, dict[str, Summary]]:
    """arm -> metric -> Summary over the arm's finished seeds."""
    return {
        a.name: {m.name: Summary.of(arm_values(results, a.name, m.name)) for m in repro.metrics}
        for a in repro.arms
    }


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    arm: Summary
    baseline: Summary
    diff: Difference
    verdict: str
    paired: Difference | None = None  # by seed, when ≥ 2 seeds are common (the verdict's)


def mixed_weights(results: list[RunResult], arms: tuple[str, ...]) -> bool:
    """True when the finished runs of `arms` started from different weights of a warm start.

    A warm start retrained on another machine keeps its name but not its weights;
    arms trained from two bases are not a comparison of methods.
    """
    seen: dict[str, str] = {}
    for r in results:
        if r.done and r.run.arm.name in arms:
            for name, digest in manifest_weights(r.run.manifest, r.run.config).items():
                if seen.setdefault(name, digest) != digest:
                    return True
    return False


def claim_results(repro: Reproduction, results: list[RunResult]) -> list[ClaimResult]:
    """Each claim's difference and verdict (see `rlvr_jax.repro.stats`)."""
    out = []
    for c in repro.claims:
        a = Summary.of(arm_values(results, c.arm, c.metric))
        b = Summary.of(arm_values(results, c.baseline, c.metric))
        d = Difference.of(a, b)
        p = paired_difference(results, c.arm, c.baseline, c.metric)
        v = verdict(p or d, c.direction, c.bound(b.mean))
        if mixed_weights(results, (c.arm, c.baseline)):
            v = MIXED_WEIGHTS
        elif c.exercised and v != NO_VERDICT:
            pre = Summary.of(arm_values(results, c.arm, c.exercised))
            if not pre.mean > 0:  # NaN (not logged) counts as not exercised too
                value = repro.metric(c.exercised).fmt.format(
                    pre.mean * repro.metric(c.exercised).scale
                )
                v = f"{NOT_EXERCISED} ({c.exercised} = {value} in {c.arm})"
        out.append(ClaimResult(c, a, b, d, v, p))
    return out
