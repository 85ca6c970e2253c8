"""Likelihood shift aligned to the first operator: token location and the averaging by hand."""

import numpy as np
import pytest

from rlvr_jax.analysis.likelihood_shift import aligned_shift, operator_token_index
from rlvr_jax.train.warmstart import default_tokenizer


def test_operator_token_index_finds_the_first_operator():
    tok = default_tokenizer()
    ids = tok.encode("10 + 8 = 18\n18 * 2 = 36\nAnswer: (10+8)*2")
    j = operator_token_index(tok, ids)
    assert tok.decode(ids[:j]) == "10" and tok.decode(ids[: j + 1]).strip().endswith("+")
    assert operator_token_index(tok, tok.encode("I give up")) is None


def test_aligned_shift_averages_responses_then_problems():
    # Problem 0: two responses, anchors at 1 and 0; problem 1: one response, anchor 2.
    deltas = [np.array([1.0, -2.0, 0.5]), np.array([3.0, 1.0]), np.array([4.0, 4.0, -2.0, 1.0])]
    out = aligned_shift(deltas, [1, 0, 2], [0, 0, 1], window=2)
    assert out["offsets"] == [-2, -1, 0, 1, 2]
    # |Δ| at offset -2: only problem 1 (4); -1: p0 1, p1 4 -> 2.5; 0: p0 mean(2, 3), p1 2 -> 2.25
    np.testing.assert_allclose(out["mean_abs"], [4.0, 2.5, 2.25, (0.75 + 1.0) / 2, np.nan])
    np.testing.assert_allclose(out["mean"][:3], [4.0, 2.5, ((-2.0 + 3.0) / 2 - 2.0) / 2])
    assert out["problems"] == [1, 2, 2, 2, 0]
    # pre (offsets <= 0) per response: p0: mean(1,2)=1.5 and 3 -> 2.25; p1: mean(4,4,2)=10/3.
    pre = (2.25 + 10 / 3) / 2
    post = ((0.5 + 1.0) / 2 + 1.0) / 2  # p0: 0.5 and 1 -> 0.75; p1: 1
    assert out["pre"] == pytest.approx(pre) and out["post"] == pytest.approx(post)
    assert out["ratio"] == pytest.approx(pre / post)
    assert out["num_problems"] == 2 and out["num_responses"] == 3


def test_aligned_shift_without_responses():
    out = aligned_shift([], [], [], window=1)
    assert out["num_responses"] == 0 and np.isnan(out["pre"])
    assert np.isnan(out["mean_abs"]).all() and out["problems"] == [0, 0, 0]
