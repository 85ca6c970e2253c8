"""Suite metrics against hand-computed values and NumPy/`math.comb` references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlvr_jax.eval.metrics import (
    average_row,
    benchmark_metrics,
    estimate,
    maj_at_k,
    majority,
    pass_curve,
)
from rlvr_jax.eval.prompts import extract_letter, extract_program, render


def test_pass_at_k_equals_the_binomial_formula_for_every_k():
    rng = np.random.default_rng(0)
    correct = rng.random((7, 6)) < 0.4
    c = correct.sum(1)
    for k in range(1, 7):
        want = np.mean([1 - math.comb(6 - ci, k) / math.comb(6, k) for ci in c])
        got = benchmark_metrics(correct, correct.astype(float), None, [k])[f"pass@{k}"]["value"]
        assert got == pytest.approx(want, abs=1e-12)
    assert pass_curve(correct)[2] == pytest.approx(
        np.mean([1 - math.comb(6 - ci, 3) / math.comb(6, 3) for ci in c])
    )


def test_avg_and_standard_error_and_bootstrap():
    correct = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)
    out = benchmark_metrics(correct, correct.astype(float), [["a"] * 4] * 3, [1, 4])
    per = np.array([0.5, 0.25, 0.0])
    assert out["avg@4"]["value"] == pytest.approx(0.25)
    assert out["avg@4"]["se"] == pytest.approx(per.std(ddof=1) / math.sqrt(3))
    assert out["pass@4"]["value"] == pytest.approx(2 / 3)
    lo, hi = out["avg@4"]["ci95"]
    assert 0.0 <= lo <= 0.25 <= hi <= 0.5
    assert estimate([0.3])["se"] == 0.0


def test_majority_votes_and_ties():
    assert majority(["1", "2", "2"], [True, False, False]) is False
    assert majority(["1", "2", "1"], [True, False, True]) is True
    assert majority(["2", "1"], [False, True]) is False  # tie: the earliest answer wins
    assert majority([None, None], [False, False]) is False
    assert majority([None, "3"], [False, True]) is True  # an abstention never wins


def test_maj_at_k_is_the_mean_over_k_subsets():
    votes, correct = ["5", "5", "7", None], [True, True, False, False]
    # k = 2: subsets {01}{02}{03}{12}{13}{23} -> majorities 5,5(tie, earliest),5,5,5,7 -> 5/6
    assert maj_at_k(votes, correct, 2) == pytest.approx(5 / 6)
    assert maj_at_k(votes, correct, 4) == 1.0
    assert maj_at_k(votes, correct, 1) == pytest.approx(0.5)  # = avg over samples
    want = np.mean([majority([votes[i] for i in s], [correct[i] for i in s])
                    for s in itertools.combinations(range(4), 3)])  # fmt: skip
    assert maj_at_k(votes, correct, 3) == pytest.approx(want)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        maj_at_k(votes, correct, 5)


def test_code_metrics_report_test_pass_rate_not_maj():
    correct = np.array([[True, False], [False, False]])
    scores = np.array([[1.0, 0.5], [0.25, 0.0]])
    out = benchmark_metrics(correct, scores, None, [1, 2])
    assert "maj@1" not in out
    assert out["test_pass_rate"]["value"] == pytest.approx((0.75 + 0.125) / 2)
    assert out["pass@2"]["value"] == pytest.approx(0.5)


def test_average_row_is_the_unweighted_mean_with_combined_se():
    a = {"pass@1": {"value": 0.2, "se": 0.03}}
    b = {"pass@1": {"value": 0.6, "se": 0.04}, "maj@1": {"value": 0.1, "se": 0.0}}
    row = average_row([a, b])
    assert set(row) == {"pass@1"}
    assert row["pass@1"]["value"] == pytest.approx(0.4)
    assert row["pass@1"]["se"] == pytest.approx(0.05 / 2)


@pytest.mark.parametrize(
    "text, n, want",
    [
        ("so \\boxed{B}", 4, "B"),
        ("\\boxed{(C)} done", 4, "C"),
        ("\\boxed{\\text{D}}", 4, "D"),
        ("\\boxed{B) 42 kg}", 4, "B"),
        ("Answer: E", 4, None),  # only 4 options
        ("Answer: E", 10, "E"),
        ("I think the answer is (A).", 4, "A"),
        ("\\boxed{Because}", 4, None),
        ("\\boxed{42}\nAnswer: B", 4, "B"),
        ("Answer: A ... on reflection Answer: C", 4, "C"),
        ("no letter here", 4, None),
    ],
)
def test_extract_letter(text, n, want):
    assert extract_letter(text, n) == want


def test_extract_program_takes_the_last_closed_python_block():
    text = "```python\nprint(1)\n```\ntext\n```py\nprint(2)\n```\n```bash\nls\n```\n```python\ncut"
    assert extract_program(text) == "print(2)\n"
    assert extract_program("no code") is None


def test_render_replaces_prompt_and_keeps_latex_braces():
    out = render("{prompt}\nPut it in \\boxed{}.", "What is $\\frac{1}{2}$?")
    assert out == "What is $\\frac{1}{2}$?\nPut it in \\boxed{}."
    with pytest.raises(ValueError, match="must contain"):
        render("no placeholder", "x")
