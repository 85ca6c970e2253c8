"""Beta-Binomial kernels against Monte Carlo and hand-computed values."""

import numpy as np
import pytest

from rlvr_jax.scheduling import betabin


def test_betabinom_pmf_matches_monte_carlo():
    rng = np.random.default_rng(0)
    a, b, n = 0.7, 1.9, 6
    p = rng.beta(a, b, 400_000)
    k = rng.binomial(n, p)
    mc = np.bincount(k, minlength=n + 1) / len(k)
    exact = np.exp(np.asarray(betabin.betabinom_logpmf(np.arange(n + 1.0), float(n), a, b)))
    np.testing.assert_allclose(exact.sum(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(exact, mc, atol=3e-3)


def test_prob_effective_hand_value():
    # Beta(1,1), probe 2/2, G = 8: posterior Beta(3,1), E[p^6] = 3/9 -> P = 2/3.
    one = np.ones((1, 1), np.float32)
    p = betabin.prob_effective(one, one, one, np.array([2.0]), np.array([2.0]), 8.0)
    np.testing.assert_allclose(np.asarray(p), [2 / 3], rtol=1e-5)
    # A mixed probe is already effective; a full all-equal group is not.
    for k, n, want in ((1.0, 2.0, 1.0), (8.0, 8.0, 0.0)):
        p = betabin.prob_effective(one, one, one, np.array([k]), np.array([n]), 8.0)
        np.testing.assert_allclose(np.asarray(p), [want], atol=1e-6)


@pytest.mark.parametrize("k,n", [(0, 0), (2, 2), (0, 3), (1, 3)])
def test_prob_effective_mixture_vs_monte_carlo(k, n):
    rng = np.random.default_rng(1)
    alpha = np.array([[0.5, 4.0]], np.float32)
    beta = np.array([[3.0, 0.6]], np.float32)
    weight = np.array([[0.3, 0.7]], np.float32)
    g, draws = 8, 1_000_000
    comp = rng.random(draws) < weight[0, 1]
    p = rng.beta(np.where(comp, alpha[0, 1], alpha[0, 0]), np.where(comp, beta[0, 1], beta[0, 0]))
    probe = rng.binomial(n, p)
    keep = probe == k  # condition on the observed probe by rejection
    rest = rng.binomial(g - n, p[keep])
    total = k + rest
    mc = np.mean((total > 0) & (total < g))
    exact = betabin.prob_effective(alpha, beta, weight, np.array([k]), np.array([n]), float(g))
    np.testing.assert_allclose(np.asarray(exact)[0], mc, atol=4e-3)


def test_host_padding_matches_direct():
    rng = np.random.default_rng(2)
    a = rng.uniform(0.2, 3, (50, 2)).astype(np.float32)
    b = rng.uniform(0.2, 3, (50, 2)).astype(np.float32)
    w = np.full((50, 2), 0.5, np.float32)
    idx = np.array([3, 7, 7, 40])
    k, n = np.array([0, 1, 2, 0]), np.array([2, 3, 2, 0])
    got = betabin.prob_effective_host(a, b, w, idx, k, n, 8)
    want = [  # one row at a time: the [1]-shaped program the other tests compiled
        np.asarray(betabin.prob_effective(a[[i]], b[[i]], w[[i]], k[[j]], n[[j]], 8.0))[0]
        for j, i in enumerate(idx)
    ]
    np.testing.assert_allclose(got, want, rtol=1e-6)
