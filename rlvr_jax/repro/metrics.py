"""Per-run numbers of a reproduction, read from a run's metrics.jsonl records.

`metric_value(records, group_size, metric)` implements the reductions of
`rlvr_jax.repro.spec.Metric`. Rollouts and generated tokens are counted the same
way for every select stage: every scheduler (uniform and dynamic sampling
included) logs `select/rollouts` and `select/tokens` per step. Runs logged
before uniform / dynamic sampling were schedulers have `sampled_groups` instead
(every sampled group has G rollouts), whose tokens are estimated as
`response_len` (the mean over the rows kept) times the rollouts sampled.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlvr_jax.repro.spec import Metric

PASS_1 = Metric("pass@1", "pass@1", scale=100.0, fmt="{:.1f}", doc="held-out pass@1 after RL, in %")
PASS_1_BEFORE = Metric(
    "pass@1 before",
    "pass@1",
    reduce="initial",
    scale=100.0,
    fmt="{:.1f}",
    doc="held-out pass@1 of the policy before RL (the step-0 evaluation), in %",
)
GAIN = Metric(
    "gain",
    "pass@1",
    reduce="gain",
    scale=100.0,
    fmt="{:.1f}",
    doc="held-out pass@1 after RL minus before (the same run's step-0 evaluation), in points",
)
ROLLOUTS = Metric(
    "rollouts", "rollouts", reduce="rollouts", fmt="{:.0f}", doc="rollouts generated in all steps"
)
TOKENS = Metric(
    "tokens", "tokens", reduce="tokens", fmt="{:.0f}", doc="response tokens generated in all steps"
)
EFFECTIVE = Metric(
    "effective/1k",
    "effective",
    reduce="effective_per_1k",
    fmt="{:.1f}",
    doc="groups with non-zero reward variance per 1000 rollouts generated",
)
STEP_SECONDS = Metric(
    "step s",
    "step_seconds",
    reduce="mean",
    fmt="{:.1f}",
    doc="mean wall seconds of an RL step (sampling + update; a loaded machine inflates it)",
)
ROLLOUT_SECONDS = Metric(
    "rollout s",
    "rollout_seconds",
    reduce="mean",
    fmt="{:.2f}",
    doc="mean wall seconds of an RL step's rollout sampling (a loaded machine inflates it)",
)
ENTROPY = Metric(
    "entropy", "entropy", reduce="mean", fmt="{:.3f}", doc="mean token entropy of the rollouts"
)


def pass_at(k: int) -> Metric:
    """Held-out pass@k after RL, in percent."""
    return Metric(
        f"pass@{k}", f"pass@{k}", scale=100.0, fmt="{:.1f}", doc=f"held-out pass@{k} after RL, in %"
    )


def _train(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("split") == "train"]


def _evals(records: list[dict]) -> list[dict]:
    """Eval records by step; a step evaluated twice (a resumed run) keeps its last."""
    by_step = {r["step"]: r for r in records if r.get("split") == "eval"}
    return [by_step[s] for s in sorted(by_step)]


def _number(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return math.nan
    return float(x)


def step_rollouts(record: dict, group_size: int) -> float:
    """Rollouts generated in one train step (see the module docstring)."""
    if "select/rollouts" in record:
        return _number(record["select/rollouts"])
    return _number(record.get("sampled_groups")) * group_size


def step_tokens(record: dict, group_size: int) -> float:
    """Response tokens generated in one train step (see the module docstring)."""
    if "select/tokens" in record:
        return _number(record["select/tokens"])
    return _number(record.get("response_len")) * step_rollouts(record, group_size)


def step_effective(record: dict) -> float:
    """Groups with reward variance > 0 among those sampled in one train step."""
    if "select/effective_groups" in record:
        return _number(record["select/effective_groups"])
    sampled = _number(record.get("sampled_groups"))
    return sampled * (1.0 - _number(record.get("zero_variance_groups")))


def metric_value(records: list[dict], group_size: int, metric: Metric) -> float:
    """The run's value of `metric` (NaN when the run did not log what it needs).

    Args:
      records: the run's metrics.jsonl records (`split` "train" / "eval", `step`).
      group_size: G of the run's config (rollouts per sampled group).
      metric: what to compute.
    Returns:
      The value, unscaled.
    """
    train, evals = _train(records), _evals(records)
    if metric.reduce == "final":
        return _number(evals[-1].get(metric.key)) if evals else math.nan
    if metric.reduce in ("initial", "gain"):
        first = evals[0] if evals and evals[0]["step"] == 0 else {}
        initial = _number(first.get(metric.key))
        if metric.reduce == "initial":
            return initial
        return _number(evals[-1].get(metric.key)) - initial if len(evals) > 1 else math.nan
    if metric.reduce == "rollouts":
        return float(sum(step_rollouts(r, group_size) for r in train)) if train else math.nan
    if metric.reduce == "tokens":
        return float(sum(step_tokens(r, group_size) for r in train)) if train else math.nan
    if metric.reduce == "effective_per_1k":
        rollouts = sum(step_rollouts(r, group_size) for r in train)
        return 1000 * sum(step_effective(r) for r in train) / rollouts if train else math.nan
    if metric.reduce == "rollouts_to":
        spent = np.cumsum([step_rollouts(r, group_size) for r in train])
        by_step = dict(zip([r["step"] for r in train], spent, strict=True))
        for e in evals:
            if _number(e.get(metric.key)) >= metric.target:
                return 0.0 if e["step"] == 0 else float(by_step.get(e["step"], math.nan))
        return math.nan
    if metric.reduce == "stage_steps":
        if not any("stage" in r for r in records):
            return math.nan
        return float(sum(r.get("stage") == metric.key for r in train))
    values = [_number(r[metric.key]) for r in train if metric.key in r]
    if not values:
        return math.nan
    if metric.reduce == "sum":
        return float(np.sum(values))
    if metric.reduce == "mean":
        return float(np.mean(values))
    return values[-1]  # "last"


def curve(records: list[dict], split: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one key over the run (eval records deduplicated by step)."""
    rows = _evals(records) if split == "eval" else _train(records)
    out = [(r["step"], _number(r.get(key))) for r in rows if key in r]
    return [s for s, _ in out], [v for _, v in out]


def cost_curve(records: list[dict], group_size: int, key: str = "pass@1"):
    """(rollouts generated before each evaluation, its value of `key`): accuracy vs cost."""
    spent = np.cumsum([step_rollouts(r, group_size) for r in _train(records)])
    by_step = {0: 0.0} | dict(
        zip([r["step"] for r in _train(records)], spent.tolist(), strict=True)
    )
    out = [(by_step.get(e["step"], math.nan), _number(e.get(key))) for e in _evals(records)]
    return [x for x, _ in out], [v for _, v in out]
