"""PAIR: unbiasedness by exhaustive enumeration, RLOO reduction, and the design's optimality."""

import itertools

import numpy as np
import scipy.optimize

from rlvr_jax.scheduling import pair_math


def _expected_estimate(reward, grad, group, pi, cands, weighted=True):
    """E over every inclusion pattern (independent Bernoulli(π)) of the estimator."""
    total = np.zeros(grad.shape[1])
    for bits in itertools.product([0, 1], repeat=len(pi)):
        inc = np.array(bits, bool)
        prob = np.prod(np.where(inc, pi, 1 - pi))
        if prob == 0:
            continue
        if weighted:
            est = pair_math.pair_gradient(reward, grad, group, inc, pi, cands)
        else:  # naive: RLOO over whatever completed, no reweighting
            observed = np.array([np.sum(inc & (group == g)) for g in group], np.float32)
            est = pair_math.pair_gradient(reward, grad, group, inc, np.ones_like(pi), observed)
        total += prob * np.asarray(est, np.float64)
    return total


def test_pair_estimator_is_unbiased_by_enumeration():
    rng = np.random.default_rng(0)
    group = np.array([0, 0, 0, 0, 1, 1, 1], np.int32)
    reward = np.array([1, 0, 0, 1, 0.3, 1.0, 0.0], np.float32)
    grad = rng.normal(size=(7, 3)).astype(np.float32)
    pi = np.array([1.0, 0.3, 0.7, 0.15, 0.5, 1.0, 0.9], np.float32)
    cands = np.array([4, 4, 4, 4, 3, 3, 3], np.float32)
    target = np.asarray(
        pair_math.pair_gradient(reward, grad, group, np.ones(7, bool), np.ones(7), cands)
    )
    np.testing.assert_allclose(
        _expected_estimate(reward, grad, group, pi, cands), target, rtol=1e-5, atol=1e-6
    )
    naive = _expected_estimate(reward, grad, group, pi, cands, weighted=False)
    assert np.max(np.abs(naive - target)) > 0.05  # unweighted adaptive selection is biased


def test_all_included_is_rloo():
    reward = np.array([1.0, 0.0, 0.0, 1.0, 0.5, 0.25], np.float32)
    group = np.array([0, 0, 0, 0, 1, 1], np.int32)
    cands = np.array([4, 4, 4, 4, 2, 2], np.float32)
    adv = pair_math.pair_advantages(reward, group, np.ones(6, bool), np.ones(6), cands)
    rloo = []
    for i in range(6):
        others = reward[(group == group[i]) & (np.arange(6) != i)]
        rloo.append(reward[i] - others.mean())
    np.testing.assert_allclose(np.asarray(adv), rloo, rtol=1e-6)


def test_contrast_mass_hand_value():
    p = np.array([0.5, 1.0, 0.0, 0.2], np.float32)
    u = pair_math.contrast_mass(p, np.array([0, 0, 0, 1], np.int32))
    # u_0 = (.5) + (.5); u_1 = .5 + 1; u_2 = .5 + 1; lone candidate: 0.
    np.testing.assert_allclose(np.asarray(u), [1.0, 1.5, 1.5, 0.0], rtol=1e-6)


def test_design_is_optimal_and_within_budget():
    rng = np.random.default_rng(3)
    n = 12
    u = rng.uniform(0.05, 2.0, n).astype(np.float32)
    c = rng.uniform(50, 500, n).astype(np.float32)
    active = np.ones(n, bool)
    active[:2] = False  # finished in the prefix: π = 1, no cost
    budget, pi_min = 0.4 * float(c[2:].sum()), 0.05
    pi = np.asarray(pair_math.design_inclusion(u, c, active, budget, pi_min), np.float64)
    assert np.all(pi[:2] == 1.0) and np.all((pi >= pi_min - 1e-7) & (pi <= 1 + 1e-7))
    spent = float(np.sum(pi[2:] * c[2:]))
    assert spent <= budget * (1 + 1e-5) and spent >= budget * (1 - 1e-3)  # tight

    def objective(x):
        return float(np.sum(u[2:] / x**2))

    ref = scipy.optimize.minimize(
        objective,
        np.full(n - 2, 0.4),
        bounds=[(pi_min, 1.0)] * (n - 2),
        constraints=[{"type": "ineq", "fun": lambda x: budget - np.dot(x, c[2:])}],
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 500},
    )
    assert objective(pi[2:]) <= ref.fun * (1 + 1e-4)


def test_design_edge_cases():
    u = np.array([1.0, 1.0], np.float32)
    c = np.array([100.0, 100.0], np.float32)
    act = np.ones(2, bool)
    np.testing.assert_allclose(pair_math.design_inclusion(u, c, act, 1e9, 0.1), [1, 1])
    np.testing.assert_allclose(pair_math.design_inclusion(u, c, act, 1.0, 0.1), [0.1, 0.1])
