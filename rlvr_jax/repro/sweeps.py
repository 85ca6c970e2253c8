"""Coefficients chosen on the validation split (`spec.Sweep`): the candidate runs, the choice.

  sweep_reproduction(repro)   the candidate arms as a reproduction of their own
  choose(repro, results)      arm -> Choice (each value's mean validation metric)
  resolve(repro, choices)     `repro` whose swept arms run with their chosen values

A candidate is the arm with the sweep's field set to one value and
`eval.validation_problems` set, so every seed of a resolved arm also logs its
validation metric and the candidate run of the chosen value at a page seed is
that seed's run of the arm (the same config, hence the same run). The choice
reads only `val/<metric>` (the validation split's evaluation after the last
step); the test split's numbers of the candidates are never compared.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rlvr_jax.repro.pipelines import VAL
from rlvr_jax.repro.results import RunResult
from rlvr_jax.repro.spec import Arm, Metric, Reproduction, Sweep


def candidate(arm: Arm, sweep: Sweep, value: float) -> Arm:
    """`arm` run with each of `sweep.fields` = value and the validation evaluation on
    (the run's, or for a pipeline stage's coefficient that stage's: `Sweep.stage`)."""
    overrides = {
        **arm.overrides,
        **dict.fromkeys(sweep.fields, value),
        sweep.stage + "eval.validation_problems": sweep.validation_problems,
    }
    return dataclasses.replace(arm, name=f"{arm.name}[{value:g}]", overrides=overrides)


def validation_metric(sweep: Sweep) -> Metric:
    return Metric(
        f"validation {sweep.metric}",
        VAL + sweep.metric,
        scale=100.0,
        fmt="{:.1f}",
        doc=f"{sweep.metric} on {sweep.validation_problems} validation problems after RL, in %",
    )


def sweep_reproduction(repro: Reproduction) -> Reproduction | None:
    """Every candidate of `repro`'s sweeps as one reproduction (None without sweeps)."""
    if not repro.sweeps:
        return None
    arms = tuple(candidate(repro.arm(s.arm), s, v) for s in repro.sweeps for v in s.values)
    return Reproduction(
        slug=repro.slug,
        paper=repro.paper,
        arms=arms,
        baseline=arms[0].name,
        metrics=(validation_metric(repro.sweeps[0]),),
        claims=(),
        common=repro.common,
    )


def seeds(repro: Reproduction) -> list[int]:
    """The seeds the candidates run with (one design per page: the first sweep's)."""
    return list(repro.sweeps[0].seeds) if repro.sweeps else []


@dataclasses.dataclass(frozen=True)
class Choice:
    """One sweep's outcome.

    Attributes:
      sweep: the declaration.
      means: value -> mean validation metric over its finished seeds (NaN: none).
      finished: candidate runs finished, of `planned`.
      chosen: the value with the highest mean (first on a tie); None until every
        candidate run has finished.
    """

    sweep: Sweep
    means: dict[float, float]
    finished: int
    planned: int
    chosen: float | None


def choose(repro: Reproduction, results: list[RunResult]) -> dict[str, Choice]:
    """arm -> its sweep's Choice, from the candidate runs' results."""
    out = {}
    for s in repro.sweeps:
        metric = validation_metric(s).name
        means, finished = {}, 0
        for v in s.values:
            name = candidate(repro.arm(s.arm), s, v).name
            vals = [
                r.values.get(metric, math.nan)
                for r in results
                if r.run.arm.name == name and r.done and r.run.seed in s.seeds
            ]
            finished += len(vals)
            means[v] = float(np.mean(vals)) if vals else math.nan
        planned = len(s.values) * len(s.seeds)
        complete = finished == planned and not any(math.isnan(m) for m in means.values())
        chosen = max(s.values, key=lambda v: (means[v], -s.values.index(v))) if complete else None
        out[s.arm] = Choice(s, means, finished, planned, chosen)
    return out


def resolve(repro: Reproduction, choices: dict[str, Choice]) -> Reproduction:
    """`repro` whose swept arms carry their chosen values (an arm not yet chosen is as
    declared: the harness does not train it)."""
    arms = []
    for a in repro.arms:
        c = choices.get(a.name)
        if c is not None and c.chosen is not None:
            a = dataclasses.replace(a, overrides=candidate(a, c.sweep, c.chosen).overrides)
        arms.append(a)
    return dataclasses.replace(repro, arms=tuple(arms))


def unchosen(choices: dict[str, Choice]) -> set[str]:
    """The swept arms whose choice is not made yet."""
    return {arm for arm, c in choices.items() if c.chosen is None}


def table(repro: Reproduction, choices: dict[str, Choice]) -> str:
    """The page's section on the sweeps (markdown), '' without sweeps."""
    if not repro.sweeps:
        return ""
    s0 = repro.sweeps[0]
    values = sorted({v for s in repro.sweeps for v in s.values})
    head = "| arm | field | " + " | ".join(f"{v:g}" for v in values) + " | chosen |"
    lines = [head, "|" + "---|" * (len(values) + 3)]
    for s in repro.sweeps:
        c = choices.get(s.arm)
        cells = []
        for v in values:
            m = c.means.get(v, math.nan) if c else math.nan
            text = "–" if v not in s.values or math.isnan(m) else f"{100 * m:.1f}"
            cells.append(f"**{text}**" if c and c.chosen == v else text)
        chosen = (
            f"{c.chosen:g}"
            if c and c.chosen is not None
            else f"not yet ({c.finished if c else 0} of {len(s.values) * len(s.seeds)} runs)"
        )
        lines.append(f"| {s.arm} | `{s.field}` | " + " | ".join(cells) + f" | {chosen} |")
    seeds_text = ", ".join(map(str, s0.seeds))
    intro = (
        f"Each value is a run of the arm (seed{'s' * (len(s0.seeds) > 1)} {seeds_text}) that "
        f"also evaluates {s0.validation_problems} problems of the task's validation split "
        "after its last step (`eval.validation_problems`); the cells are that split's "
        f"{s0.metric} in %, and the arm runs with the best value (bold; the first on a tie). "
        "The test split is never compared. The run of the chosen value at a page seed is "
        "that seed's run of the arm.\n"
    )
    return "\n".join(["## Coefficients chosen on the validation split\n", intro, *lines]) + "\n"


def summary(choices: dict[str, Choice]) -> dict:
    """The sweeps in the page's JSON summary."""
    return {
        arm: {
            "field": c.sweep.field,
            "seeds": list(c.sweep.seeds),
            "validation": {
                f"{v:g}": None if math.isnan(m) else round(100 * m, 2) for v, m in c.means.items()
            },
            "chosen": c.chosen,
        }
        for arm, c in choices.items()
    }
