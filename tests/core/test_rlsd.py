"""RLSD's token weights (core.rlsd) against NumPy and hand-computed cases."""

import math

import numpy as np
import pytest

from rlvr_jax.core.rlsd import rlsd_weights


def _numpy_weights(teacher, student, adv, mask, eps, lam):
    w = 1 + lam * (np.clip(np.exp(np.sign(adv) * (teacher - student)), 1 - eps, 1 + eps) - 1)
    return np.where(mask, w, 1.0)


def test_the_reward_orients_the_teachers_ratio():
    d = np.array([math.log(1.5), math.log(0.5), 0.1, 0.0])
    student = np.full((2, 4), -2.0, np.float32)
    teacher = (student + d).astype(np.float32)
    adv = np.array([[1.0] * 4, [-1.0] * 4], np.float32)
    w = np.asarray(rlsd_weights(teacher, student, adv, np.ones((2, 4), bool)))
    # A > 0: ratios 1.5, .5, e^.1, 1 → clipped 1.2, .8, 1.10517, 1 → 1 + .5(r − 1).
    np.testing.assert_allclose(w[0], [1.1, 0.9, 1.052585, 1.0], rtol=1e-5)
    # A < 0: inverted ratios .667, 2, e^−.1, 1 → .8, 1.2, .904837, 1.
    np.testing.assert_allclose(w[1], [0.9, 1.1, 0.952419, 1.0], rtol=1e-5)


def test_zero_advantage_masked_tokens_and_huge_gaps():
    teacher = np.array([[1000.0, -1000.0, 5.0, 0.0]], np.float32)
    student = np.zeros((1, 4), np.float32)
    adv = np.array([[2.0, 2.0, 0.0, 3.0]], np.float32)
    mask = np.array([[1, 1, 1, 0]], bool)
    w = np.asarray(rlsd_weights(teacher, student, adv, mask, eps=0.2, lam=1.0))
    np.testing.assert_allclose(w, [[1.2, 0.8, 1.0, 1.0]], rtol=1e-6)  # finite, A = 0 → 1
    assert np.isfinite(w).all()


@pytest.mark.parametrize("eps,lam", [(0.2, 0.5), (0.1, 1.0), (0.5, 0.0)])
def test_matches_numpy(eps, lam):
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(-2, 1, (2, 6, 9)).astype(np.float32)
    adv = rng.normal(0, 1, (6, 9)).astype(np.float32)
    mask = rng.random((6, 9)) < 0.8
    got = rlsd_weights(teacher, student, adv, mask, eps=eps, lam=lam)
    want = _numpy_weights(teacher, student, adv, mask, eps, lam)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
