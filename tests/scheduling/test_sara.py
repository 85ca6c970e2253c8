"""SARA's two-threshold rule on constructed posteriors."""

import numpy as np

from rlvr_jax.scheduling import betabin
from rlvr_jax.scheduling.sara import ABANDON, COMMIT, PROBE, sara_decisions


def _p_eff(alpha, beta, k, n, g=8):
    a = np.array([[alpha]], np.float32)
    b = np.array([[beta]], np.float32)
    one = np.ones((1, 1), np.float32)
    return float(np.asarray(betabin.prob_effective(a, b, one, np.array([k]), np.array([n]), g))[0])


def test_decisions_on_constructed_posteriors():
    cases = [
        # (alpha, beta, k, n) -> decision with tau_commit = .6, tau_abandon = .2
        ((50.0, 1.0, 2, 2), ABANDON),  # confidently easy, probe all correct: saturated
        ((1.0, 50.0, 0, 2), ABANDON),  # confidently hard, probe all wrong
        ((1.0, 1.0, 1, 2), COMMIT),  # mixed probe: effective for sure
        ((1.0, 1.0, 2, 2), COMMIT),  # flat prior: P = 2/3 >= .6
        ((1.0, 1.0, 3, 3), PROBE),  # P = 5/9, between the thresholds
        ((1.0, 1.0, 7, 7), ABANDON),  # P = 1/9
    ]
    p = np.array([_p_eff(*c[:4]) for c, _ in cases])
    n = np.array([c[3] for c, _ in cases])
    np.testing.assert_allclose(p[3:6], [2 / 3, 5 / 9, 1 / 9], rtol=1e-5)
    got = sara_decisions(p, n, 8, tau_commit=0.6, tau_abandon=0.2)
    np.testing.assert_array_equal(got, [d for _, d in cases])


def test_full_group_is_committed_whatever_p():
    got = sara_decisions(np.array([0.0, 0.5]), np.array([8, 8]), 8, 0.6, 0.2)
    np.testing.assert_array_equal(got, [COMMIT, COMMIT])
