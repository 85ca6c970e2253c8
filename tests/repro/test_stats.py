"""The verdict rule, the summaries and the per-run metrics on constructed numbers."""

from __future__ import annotations

import math

import pytest

from rlvr_jax.repro.metrics import PASS_1, PASS_1_BEFORE, ROLLOUTS, TOKENS, metric_value
from rlvr_jax.repro.spec import Claim, Metric
from rlvr_jax.repro.stats import (
    NO_VERDICT,
    NOT_RESOLVED,
    OPPOSITE,
    REPRODUCES,
    Difference,
    Summary,
    verdict,
)


def test_summary_and_difference_by_hand():
    a, b = Summary.of([0.40, 0.42, 0.44]), Summary.of([0.30, 0.31, 0.32, math.nan])
    assert (a.mean, a.n, b.n) == (pytest.approx(0.42), 3, 3)
    assert a.sd == pytest.approx(0.02) and b.sd == pytest.approx(0.01)
    d = Difference.of(a, b)
    assert d.delta == pytest.approx(0.11)
    assert d.se == pytest.approx(math.sqrt(0.02**2 / 3 + 0.01**2 / 3))
    assert d.relative == pytest.approx(0.11 / 0.31)


def test_paired_difference_by_hand_and_when_pairing_resolves_what_unpairing_cannot():
    """Seeds move both arms together (.30/.35/.40 + .02): unpaired s.e. ≈ 2.9 points hides a
    Δ of 2 points that every seed shows (paired differences .02, .01, .03: s.e. 0.58)."""
    base, arm = [0.30, 0.35, 0.40], [0.32, 0.36, 0.43]
    d = Difference.paired(zip(arm, base, strict=True))
    assert d.pairs == 3 and d.delta == pytest.approx(0.02)
    assert d.se == pytest.approx(0.01 / math.sqrt(3))  # sd(.02, .01, .03) = .01
    assert d.relative == pytest.approx(0.02 / 0.35)
    unpaired = Difference.of(Summary.of(arm), Summary.of(base))
    assert unpaired.delta == pytest.approx(d.delta)
    assert verdict(unpaired, "higher") == NOT_RESOLVED
    assert verdict(d, "higher") == REPRODUCES
    # NaN pairs drop out; fewer than 2 pairs is no paired difference.
    assert Difference.paired([(0.5, 0.4), (math.nan, 0.3), (0.6, math.nan)]) is None
    assert Difference.paired([(0.5, 0.4), (0.7, 0.5)]).pairs == 2


@pytest.mark.parametrize(
    "arm, base, direction, expected",
    [
        ([0.40, 0.42, 0.44], [0.30, 0.31, 0.32], "higher", REPRODUCES),
        ([0.40, 0.42, 0.44], [0.30, 0.31, 0.32], "lower", OPPOSITE),
        ([0.30, 0.31, 0.32], [0.40, 0.42, 0.44], "lower", REPRODUCES),
        ([0.30, 0.40, 0.50], [0.30, 0.35, 0.40], "higher", NOT_RESOLVED),
        ([0.30, 0.40, 0.50], [0.30, 0.35, 0.40], "lower", NOT_RESOLVED),
        ([0.5, 0.5], [0.5, 0.5], "higher", NOT_RESOLVED),  # Δ = 0 = 2 s.e.
        ([0.6, 0.6], [0.5, 0.5], "higher", REPRODUCES),  # s.e. 0, Δ > 0
        ([0.6], [0.5, 0.5], "higher", NO_VERDICT),
        ([0.6, math.nan], [0.5, 0.5], "higher", NO_VERDICT),
    ],
)
def test_verdict_rule(arm, base, direction, expected):
    assert verdict(Difference.of(Summary.of(arm), Summary.of(base)), direction) == expected


def test_verdict_boundary_is_two_standard_errors():
    base = Summary(0.0, 3.0, 9)  # s.e. = √(3²/9 + 0) = 1 exactly
    arm = Summary(2.0, 0.0, 3)
    assert verdict(Difference.of(arm, base), "higher") == NOT_RESOLVED  # |Δ| = 2 s.e.
    arm = Summary(2.001, 0.0, 3)
    assert verdict(Difference.of(arm, base), "higher") == REPRODUCES


def test_within_claims_need_the_whole_interval_inside_the_margin():
    base = Summary(0.0, 3.0, 9)  # s.e. = 1 with an arm of sd 0
    at = lambda mean: Difference.of(Summary(mean, 0.0, 3), base)  # noqa: E731
    assert verdict(at(0.5), "within", margin=2.5) == REPRODUCES  # 0.5 + 2 ≤ 2.5
    assert verdict(at(-0.5), "within", margin=2.5) == REPRODUCES  # the sign does not matter
    assert verdict(at(0.6), "within", margin=2.5) == NOT_RESOLVED  # 2.6 > 2.5, 0.6 - 2 < 2.5
    assert verdict(at(4.5), "within", margin=2.5) == NOT_RESOLVED  # 4.5 - 2 = 2.5: not beyond
    assert verdict(at(-4.6), "within", margin=2.5) == OPPOSITE  # 4.6 - 2 > 2.5
    assert verdict(Difference.of(Summary(0.0, math.nan, 1), base), "within", 2.5) == NO_VERDICT


def test_at_most_claims_bound_the_excess_one_sided():
    base = Summary(10.0, 3.0, 9)  # s.e. = 1 with an arm of sd 0
    at = lambda mean: Difference.of(Summary(mean, 0.0, 3), base)  # noqa: E731
    assert verdict(at(10.5), "at_most", margin=2.5) == REPRODUCES  # 0.5 + 2 ≤ 2.5
    assert verdict(at(4.0), "at_most", margin=2.5) == REPRODUCES  # cheaper: within the bound
    assert verdict(at(11.0), "at_most", margin=2.5) == NOT_RESOLVED
    assert verdict(at(14.6), "at_most", margin=2.5) == OPPOSITE  # 4.6 - 2 > 2.5
    # A relative bound: 9% of a baseline mean of 10 is 0.9.
    claim = Claim("x", "step s", "a", "b", "at_most", margin=0.09, relative=True)
    assert claim.bound(10.0) == pytest.approx(0.9) and claim.bound(-10.0) == pytest.approx(0.9)


def test_a_margin_goes_with_within_and_at_most_claims_only():
    with pytest.raises(ValueError, match="margin"):
        Claim("x", "pass@1", "a", "b", "within")
    with pytest.raises(ValueError, match="margin"):
        Claim("x", "pass@1", "a", "b", "at_most")
    with pytest.raises(ValueError, match="margin"):
        Claim("x", "pass@1", "a", "b", "higher", margin=0.01)
    with pytest.raises(ValueError, match="relative"):
        Claim("x", "pass@1", "a", "b", "higher", relative=True)


def _records():
    return [
        {"step": 0, "split": "eval", "pass@1": 0.20},
        {"step": 1, "split": "train", "sampled_groups": 4.0, "response_len": 10.0, "x": 1.0},
        {"step": 2, "split": "train", "select/rollouts": 20.0, "select/tokens": 150.0, "x": 3.0},
        {"step": 2, "split": "eval", "pass@1": 0.25},
        {"step": 3, "split": "train", "sampled_groups": 2.0, "response_len": 5.0},
        {"step": 3, "split": "eval", "pass@1": 0.30},
    ]


def test_metric_values():
    r = _records()
    assert metric_value(r, 8, PASS_1) == 0.30
    assert metric_value(r, 8, PASS_1_BEFORE) == 0.20
    assert math.isnan(metric_value(r[1:], 8, PASS_1_BEFORE))  # no step-0 evaluation
    assert metric_value(r, 8, ROLLOUTS) == 4 * 8 + 20 + 2 * 8
    assert metric_value(r, 8, TOKENS) == 10 * 32 + 150 + 5 * 16
    assert metric_value(r, 8, Metric("x", "x", reduce="sum")) == 4.0
    assert metric_value(r, 8, Metric("x", "x", reduce="mean")) == 2.0
    assert metric_value(r, 8, Metric("x", "x", reduce="last")) == 3.0
    to = Metric("r", "pass@1", reduce="rollouts_to", target=0.25)
    assert metric_value(r, 8, to) == 32 + 20  # first reached at step 2
    assert metric_value(r, 8, Metric("r", "pass@1", reduce="rollouts_to", target=0.1)) == 0.0
    assert math.isnan(metric_value(r, 8, Metric("r", "pass@1", reduce="rollouts_to", target=0.9)))
    assert math.isnan(metric_value(r, 8, Metric("y", "missing", reduce="mean")))
    assert math.isnan(metric_value([], 8, PASS_1))


def test_cost_curve_pairs_each_eval_with_the_rollouts_before_it():
    from rlvr_jax.repro.metrics import cost_curve

    xs, ys = cost_curve(_records(), 8)
    assert xs == [0.0, 32 + 20, 32 + 20 + 16] and ys == [0.20, 0.25, 0.30]


def test_seed_mean_curves_align_by_step_or_by_point():
    from rlvr_jax.repro.plot import seed_mean

    same = [([0, 5, 10], [0.1, 0.2, 0.3]), ([0, 5, 10], [0.3, 0.4, 0.5])]
    assert seed_mean("eval", same) == ([0, 5, 10], pytest.approx([0.2, 0.3, 0.4]))
    # a pipeline's switch at step 8 in one seed, 12 in the other: the i-th points pair up
    switched = [([0, 8, 24], [0.5, 0.6, 0.7]), ([0, 12, 28], [0.5, 0.8, 0.9])]
    xs, ys = seed_mean("eval", switched)
    assert xs == [0, 10, 26] and ys == pytest.approx([0.5, 0.7, 0.8])
    # train curves stay by step (a seed that logged fewer steps is averaged where it has them)
    train = [([1, 2, 3], [1.0, 2.0, 3.0]), ([1, 2], [3.0, 4.0])]
    assert seed_mean("train", train) == ([1, 2, 3], pytest.approx([2.0, 3.0, 3.0]))
