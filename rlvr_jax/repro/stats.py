"""Mean ± sd over seeds, the difference of two arms with its standard error, and the verdict.

The verdict rule (stated on every page):

  Δ = mean(arm) − mean(baseline) over the finished seeds of each arm;
  s.e. = sqrt(sd_arm² / n_arm + sd_baseline² / n_baseline) (sample sd, ddof 1);
  reproduces     the paper's direction and |Δ| > 2 s.e.;
  not resolved   |Δ| ≤ 2 s.e. ("not resolved at this scale");
  opposite       the other direction and |Δ| > 2 s.e.;
  no verdict     fewer than 2 finished seeds with a value in either arm.

Arms run with the same seed share the prompt order and the sampling keys, so
their runs are paired by seed. Where both arms finished at least 2 common seeds,
the paired difference is reported beside the unpaired one and the verdict uses it:
Δ_paired = mean over common seeds s of (arm_s − baseline_s), s.e. = sd(arm_s −
baseline_s) / √n (sample sd). It estimates the same mean difference (on the
common seeds) and its s.e. needs no assumption that the arms are independent.

A claim that two arms are equivalent ("within" a margin m, e.g. "differ by at most
1.4 points"): reproduces when |Δ| + 2 s.e. ≤ m (the ±2 s.e. interval lies inside
±m); opposite when |Δ| − 2 s.e. > m (it lies outside); not resolved otherwise.
A bounded cost ("at_most" m, e.g. "< 9% overhead", m relative to the baseline's
mean): reproduces when Δ + 2 s.e. ≤ m; opposite when Δ − 2 s.e. > m.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

REPRODUCES = "reproduces"
NOT_RESOLVED = "not resolved at this scale"
OPPOSITE = "opposite"
NO_VERDICT = "no verdict (fewer than 2 finished seeds per arm)"
MIXED_WEIGHTS = "no verdict (the two arms' runs started from different warm-start weights)"
NOT_EXERCISED = "setup did not exercise the method"
VERDICTS = (REPRODUCES, NOT_RESOLVED, OPPOSITE, NO_VERDICT, MIXED_WEIGHTS, NOT_EXERCISED)
RULE = (
    "Δ = mean(method) − mean(baseline) over each arm's finished seeds; s.e. = "
    "√(sd_m²/n_m + sd_b²/n_b) (sample sd). Paired (runs of one seed share prompts and "
    "sampling keys): Δ_p = mean over the seeds both arms finished of (method_s − "
    "baseline_s), s.e._p = sd(method_s − baseline_s)/√n; the verdict uses Δ_p and s.e._p "
    "when n ≥ 2 seeds are common, else Δ and s.e. **reproduces**: the paper's direction and "
    "|Δ| > 2 s.e.; **not resolved at this scale**: |Δ| ≤ 2 s.e.; **opposite**: the other "
    "direction and |Δ| > 2 s.e.; no verdict with fewer than 2 finished seeds in an arm, "
    "or when the two arms' runs started from different weights of a warm start. "
    "A claim that two arms differ by at most m: **reproduces** when |Δ| + 2 s.e. ≤ m, "
    "**opposite** when |Δ| − 2 s.e. > m, else not resolved; a claim that the method costs "
    "at most m more (m may be a share of the baseline's mean): **reproduces** when "
    "Δ + 2 s.e. ≤ m, **opposite** when Δ − 2 s.e. > m. A claim whose method's precondition "
    "never occurred in its runs (the logged count it names has mean 0) is **setup did not "
    "exercise the method**, whatever Δ."
)


@dataclasses.dataclass(frozen=True)
class Summary:
    """Mean, sample sd and count of the finite values of one arm's metric."""

    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, values) -> Summary:
        v = np.asarray([x for x in values if math.isfinite(x)], np.float64)
        if v.size == 0:
            return cls(math.nan, math.nan, 0)
        return cls(float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else math.nan, int(v.size))


@dataclasses.dataclass(frozen=True)
class Difference:
    """Δ = mean(arm) − mean(baseline), its standard error, and Δ relative to the baseline."""

    delta: float
    se: float
    relative: float  # Δ / |mean(baseline)| (NaN when the baseline mean is 0)
    pairs: int = 0  # the number of seeds paired (0: an unpaired difference)

    @classmethod
    def of(cls, arm: Summary, base: Summary) -> Difference:
        delta = arm.mean - base.mean
        if arm.n < 2 or base.n < 2:
            se = math.nan
        else:
            se = math.sqrt(arm.sd**2 / arm.n + base.sd**2 / base.n)
        return cls(delta, se, _relative(delta, base.mean))

    @classmethod
    def paired(cls, pairs) -> Difference | None:
        """Δ and s.e. of (arm, baseline) values paired by seed; None with < 2 finite pairs."""
        p = np.asarray(
            [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)], np.float64
        ).reshape(-1, 2)
        if len(p) < 2:
            return None
        d = p[:, 0] - p[:, 1]
        se = float(d.std(ddof=1) / math.sqrt(len(d)))
        return cls(float(d.mean()), se, _relative(float(d.mean()), float(p[:, 1].mean())), len(d))


def _relative(delta: float, base_mean: float) -> float:
    return delta / abs(base_mean) if base_mean and math.isfinite(base_mean) else math.nan


def verdict(diff: Difference, direction: str, margin: float = 0.0) -> str:
    """The verdict of one claim (see the module docstring).

    Args:
      diff: the arm's difference to the baseline.
      direction: "higher" (the paper says the arm's mean is above), "lower",
        "within" (the two means differ by at most `margin`) or "at_most" (the arm's
        mean exceeds the baseline's by at most `margin`).
      margin: the bound of a "within" / "at_most" claim (the metric's units).
    Returns:
      One of VERDICTS.
    """
    if not (math.isfinite(diff.delta) and math.isfinite(diff.se)):
        return NO_VERDICT
    if direction in ("within", "at_most"):
        excess = abs(diff.delta) if direction == "within" else diff.delta
        if excess + 2 * diff.se <= margin:
            return REPRODUCES
        return OPPOSITE if excess - 2 * diff.se > margin else NOT_RESOLVED
    if abs(diff.delta) <= 2 * diff.se:
        return NOT_RESOLVED
    sign = 1.0 if direction == "higher" else -1.0
    return REPRODUCES if sign * diff.delta > 0 else OPPOSITE
