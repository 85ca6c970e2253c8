import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import cscr


# ------------------------------------------------------------ NumPy reference (loops)
def _ref(adv, dp, dn, m, alpha, combine="mean", budget="tokens"):
    b, t = adv.shape
    out = np.zeros((b, t))
    for i in range(b):
        raw, u = np.zeros(t), np.zeros(t)
        for j in range(t):
            if m[i, j]:
                a, c = abs(float(dp[i, j])), abs(float(dn[i, j]))
                s = (a + c) / 2 if combine == "mean" else max(a, c)
                raw[j] = (1 + s) ** (-alpha)
                u[j] = 1.0 if budget == "tokens" else abs(float(adv[i, j]))
        den = np.sum(u * raw)
        for j in range(t):
            if m[i, j]:
                w = raw[j] * u.sum() / den if den > 0 else 1.0
                out[i, j] = w * adv[i, j]
    return out


def _inputs(seed, b, t):
    rng = np.random.default_rng(seed)
    m = rng.random((b, t)) < 0.7
    m[0] = False  # fully masked row
    m[1] = False
    m[1, 2 % t] = True  # length-1 response
    adv_B = rng.normal(size=b)
    adv_B[2] = 0.0  # zero-variance group
    adv = np.where(m, adv_B[:, None], 0).astype(np.float32)
    dp = rng.normal(0, 2, (b, t)).astype(np.float32)
    dn = (0.7 * dp + rng.normal(0, 0.5, (b, t))).astype(np.float32)
    dp[~m] = np.nan  # padding may hold anything
    return adv, dp, dn, m


@pytest.mark.parametrize("b,t", [(5, 6), (8, 3), (3, 11)])
@pytest.mark.parametrize(
    "alpha,combine,budget",
    [(1.0, "mean", "tokens"), (0.5, "max", "tokens"), (2.0, "mean", "abs_adv")],
)
def test_matches_reference(b, t, alpha, combine, budget):
    adv, dp, dn, m = _inputs(b * t, b, t)
    got = cscr.cscr_advantages(adv, dp, dn, m, alpha=alpha, combine=combine, budget=budget)
    np.testing.assert_allclose(
        got, _ref(adv, dp, dn, m, alpha, combine, budget), rtol=1e-6, atol=1e-6
    )
    assert np.all(np.isfinite(got)) and np.all(np.asarray(got)[0] == 0)


def test_non_broadcast_advantages_abs_budget():
    # After a token-level transform (mixed signs in a row): "abs_adv" keeps Σ|A|, signs kept.
    adv = np.float32([[1.0, -2.0, 0.5, 3.0]])
    dp = np.float32([[0.1, 3.0, 0.0, 1.0]])
    m = np.ones((1, 4), bool)
    got = np.asarray(cscr.cscr_advantages(adv, dp, dp, m, alpha=1.0, budget="abs_adv"))
    np.testing.assert_allclose(np.abs(got).sum(), np.abs(adv).sum(), rtol=1e-6)
    np.testing.assert_array_equal(np.sign(got), np.sign(adv))
    np.testing.assert_allclose(got, _ref(adv, dp, dp, m, 1.0, budget="abs_adv"), rtol=1e-6)


def test_hand_computed():
    # s = (0, 1) (mean of |Δ⁺| = (0, 2), |Δ⁻| = (0, 0)), α = 1: w̃ = (1, 1/2), Σ = 1.5,
    # w = (4/3, 2/3); A = 3 → (4, 2).
    got = cscr.cscr_advantages(
        np.float32([[3.0, 3.0]]),
        np.float32([[0.0, 2.0]]),
        np.float32([[0.0, 0.0]]),
        np.ones((1, 2), bool),
        alpha=1.0,
    )
    np.testing.assert_allclose(got, [[4.0, 2.0]], rtol=1e-6)


def test_alpha_zero_is_identity_and_length_one_is_unchanged():
    adv, dp, dn, m = _inputs(1, 6, 5)
    np.testing.assert_allclose(cscr.cscr_advantages(adv, dp, dn, m, alpha=0.0), adv, rtol=1e-6)
    got = cscr.cscr_advantages(adv, dp, dn, m, alpha=3.0)
    np.testing.assert_allclose(np.asarray(got)[1], adv[1], rtol=1e-6)  # one token: w = 1


def test_shift_agreement():
    dp = np.float32([[1.0, -2.0, 0.5, 3.0, 9.0]])
    dn = np.float32([[2.0, -1.0, -0.5, 0.0, 1.0]])
    m = np.array([[1, 1, 1, 1, 0]], bool)
    out = cscr.shift_agreement(dp, dn, m)
    # Counted: tokens 0-2 (token 3 has Δ⁻ = 0, token 4 masked); same sign on 0 and 1.
    np.testing.assert_allclose(out["same_sign_frac"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(out["reversal_frac"], 1 / 3, rtol=1e-6)
    assert out["counted"] == 3


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 4.0), st.sampled_from(["tokens", "abs_adv"]))
def test_budget_and_signs_are_preserved(seed, alpha, budget):
    adv, dp, dn, m = _inputs(seed, 6, 7)
    got = np.asarray(cscr.cscr_advantages(adv, dp, dn, m, alpha=alpha, budget=budget))
    np.testing.assert_array_equal(np.sign(got), np.sign(adv))
    # Broadcast advantages: Σ_t A'_t = n_i A_i (both budgets agree here).
    np.testing.assert_allclose(got.sum(1), adv.sum(1), rtol=1e-5, atol=1e-5)
    # The most sensitive token of a row never gets more credit than the least sensitive one.
    s = np.asarray(cscr.sensitivity(dp, dn, m))
    for i in range(len(adv)):
        if m[i].sum() > 1 and adv[i].any():
            idx = np.flatnonzero(m[i])
            hi, lo = idx[np.argmax(s[i, idx])], idx[np.argmin(s[i, idx])]
            assert abs(got[i, hi]) <= abs(got[i, lo]) + 1e-6
