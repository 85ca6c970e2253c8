"""OM-GRPO kernels against NumPy loops, hand cases, edge cases and properties."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import om_grpo
from rlvr_jax.core.om_grpo import (
    answer_span_mask,
    contrast_augmented_rewards,
    soft_consensus_rewards,
)

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)
_consensus = jax.jit(soft_consensus_rewards, static_argnames="leave_one_out")
_contrast = jax.jit(contrast_augmented_rewards)
_span = jax.jit(answer_span_mask)


def consensus_reference(answer, group, valid, loo):
    out = np.zeros(len(answer))
    for i in range(len(answer)):
        if not valid[i] or answer[i] < 0:
            continue
        peers = [j for j in range(len(answer)) if valid[j] and group[j] == group[i]]
        agree = sum(1 for j in peers if answer[j] == answer[i])
        out[i] = (agree - 1) / max(len(peers) - 1, 1) if loo else agree / len(peers)
    return out


def contrast_reference(r, wins, compared, group, valid, lam):
    out = np.zeros(len(r))
    for i in range(len(r)):
        if not valid[i]:
            continue
        js = [
            j
            for j in range(len(r))
            if j != i and compared[i, j] and valid[j] and group[j] == group[i]
        ]
        out[i] = (1 - lam) * r[i] + lam * np.mean([wins[i, j] for j in js]) if js else r[i]
    return out


def span_reference(mask, start, end):
    out = mask.copy()
    for i in range(mask.shape[0]):
        n = 0
        for t in range(mask.shape[1]):
            if mask[i, t]:
                if start[i] >= 0 and start[i] <= n < end[i]:
                    out[i, t] = False
                n += 1
    return out


@pytest.mark.parametrize("b", [1, 7, 16])
@pytest.mark.parametrize("loo", [False, True])
def test_consensus_and_contrast_match_numpy_loops(b, loo):
    rng = np.random.default_rng(b + loo)
    answer = rng.integers(-1, 3, b).astype(np.int32)
    group = rng.integers(0, 3, b).astype(np.int32)
    valid = rng.random(b) < 0.85
    r = _consensus(answer, group, leave_one_out=loo, valid_B=valid)
    np.testing.assert_allclose(r, consensus_reference(answer, group, valid, loo), **TOL)
    wins = rng.random((b, b)).astype(np.float32)
    compared = rng.random((b, b)) < 0.5
    got, _ = _contrast(r, wins, compared, group, lam=0.3, valid_B=valid)
    want = contrast_reference(np.asarray(r), wins, compared, group, valid, 0.3)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("shape", [(4, 9), (9, 20), (2, 1)])
def test_span_mask_matches_numpy_loop(shape):
    rng = np.random.default_rng(shape[1])
    mask = rng.random(shape) < 0.7
    start = rng.integers(-1, shape[1], shape[0]).astype(np.int32)
    end = (start + rng.integers(0, 4, shape[0])).astype(np.int32)
    np.testing.assert_array_equal(_span(mask, start, end), span_reference(mask, start, end))


def test_hand_computed():
    # Group 0 answers [7, 7, 3, none]; group 1 answers [5, 5].
    answer = np.array([7, 7, 3, -1, 5, 5], np.int32)
    group = np.array([0, 0, 0, 0, 1, 1], np.int32)
    r = np.asarray(_consensus(answer, group, leave_one_out=False, valid_B=None))
    np.testing.assert_allclose(r, [0.5, 0.5, 0.25, 0, 1, 1], **TOL)
    r_loo = _consensus(answer, group, leave_one_out=True, valid_B=None)
    np.testing.assert_allclose(r_loo, [1 / 3, 1 / 3, 0, 0, 1, 1], **TOL)
    # Row 2 beat rows 0 and 1 (P = 1, .5); λ = .5: .5·.25 + .5·.75 = .5.
    wins = np.zeros((6, 6), np.float32)
    wins[2, 0], wins[2, 1] = 1.0, 0.5
    compared = np.zeros((6, 6), bool)
    compared[2, :2] = True
    compared[2, 4] = True  # another group: ignored
    got, win = _contrast(r, wins, compared, group, lam=0.5, valid_B=None)
    np.testing.assert_allclose(got, [0.5, 0.5, 0.5, 0, 1, 1], **TOL)
    np.testing.assert_allclose(win, [0, 0, 0.75, 0, 0, 0], **TOL)
    mask = np.array([[0, 1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(_span(mask, np.array([2]), np.array([4])), [[0, 1, 1, 0, 0]])


def test_edge_cases_no_nan():
    answer = np.array([-1, -1, 4], np.int32)  # two unanswered, a group of one
    group = np.array([0, 0, 1], np.int32)
    valid = np.array([True, True, True])
    for loo in (False, True):
        r = np.asarray(_consensus(answer, group, leave_one_out=loo, valid_B=valid))
        assert np.isfinite(r).all()
        np.testing.assert_allclose(r, [0, 0, 0 if loo else 1])
    mask = np.zeros((2, 3), bool)
    np.testing.assert_array_equal(_span(mask, np.array([0, -1]), np.array([3, 2])), mask)
    got, win = _contrast(np.ones(3, np.float32), np.full((3, 3), np.nan, np.float32),
                         np.zeros((3, 3), bool), group, lam=0.5, valid_B=valid)  # fmt: skip
    np.testing.assert_allclose(got, 1.0)  # uncompared: NaN wins never read


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_consensus_properties(seed):
    rng = np.random.default_rng(seed)
    answer = rng.integers(-1, 4, 12).astype(np.int32)
    group = np.repeat(np.arange(3), 4).astype(np.int32)
    r = np.asarray(_consensus(answer, group, leave_one_out=False, valid_B=None))
    for g in range(3):
        rows = group == g
        # The shares of a group's distinct answers sum to ≤ 1, over its rows to Σ n_a²/n.
        a = answer[rows]
        _, counts = np.unique(a[a >= 0], return_counts=True)
        np.testing.assert_allclose(r[rows].sum(), (counts**2).sum() / 4, rtol=1e-6)
        # The majority answer has the largest reward.
        if (a >= 0).any():
            assert r[rows][a >= 0].max() == r[rows].max()
    # Relabelling answers leaves the rewards unchanged.
    perm = np.where(answer >= 0, (answer * 7 + 3) % 11, -1)
    np.testing.assert_allclose(_consensus(perm, group, leave_one_out=False, valid_B=None), r)


def _majority_reference(answers, groups, valid):
    from collections import Counter

    rewards, majority = [], []
    for i in range(len(answers)):
        if not valid[i]:
            rewards.append(0.0)
            majority.append(-1)
            continue
        votes = [answers[j] for j in range(len(answers)) if groups[j] == groups[i] and valid[j]]
        votes = [x for x in votes if x >= 0]
        top = Counter(votes).most_common(1)[0][0] if votes else -1  # first seen wins ties
        majority.append(top)
        rewards.append(float(answers[i] >= 0 and answers[i] == top))
    return np.array(rewards, np.float32), np.array(majority, np.int32)


def test_majority_vote_matches_counter_reference():
    rng = np.random.default_rng(0)
    for _ in range(30):
        b = int(rng.integers(1, 13))
        answers = rng.integers(-1, 4, b)
        groups = rng.integers(0, 3, b)
        valid = rng.random(b) < 0.85
        got_r, got_m = om_grpo.majority_vote_rewards(answers, groups, valid_B=valid)
        want_r, want_m = _majority_reference(answers.tolist(), groups.tolist(), valid.tolist())
        np.testing.assert_array_equal(np.asarray(got_r), want_r)
        np.testing.assert_array_equal(np.asarray(got_m), want_m)


def test_majority_vote_hand_computed_ties_and_empty_groups():
    # Group 0: answers 5, 7, 7, 5 -> tie, 5 seen first; group 1: no answers.
    r, m = om_grpo.majority_vote_rewards([5, 7, 7, 5, -1, -1], [0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(r), [1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(np.asarray(m), [5, 5, 5, 5, -1, -1])
    # Majority differs from the soft consensus: the consensus share is graded, the vote is 0/1.
    r, _ = om_grpo.majority_vote_rewards([1, 1, 2], [0, 0, 0])
    cons = om_grpo.soft_consensus_rewards([1, 1, 2], [0, 0, 0])
    np.testing.assert_allclose(np.asarray(r), [1, 1, 0])
    np.testing.assert_allclose(np.asarray(cons), [2 / 3, 2 / 3, 1 / 3], rtol=1e-6)
