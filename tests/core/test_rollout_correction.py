"""Behaviour-policy corrections: hand-computed weights, an independent NumPy reference,
exactly the tokens outside the band dropped, zeros at masked positions."""

import math

import numpy as np
import pytest

from rlvr_jax.core.rollout_correction import CORRECTIONS, correction_stats, correction_weights

# Two rows, three tokens; row 1's last token is padding (NaN in both arrays).
OLD = np.array([[-1.0, -2.0, -0.5], [-0.3, -0.1, np.nan]], np.float32)
MU = np.array([[-1.5, -1.0, -0.5], [-0.1, -2.0, np.nan]], np.float32)
MASK = np.array([[1, 1, 1], [1, 1, 0]], bool)
# log ρ = old − μ: [[0.5, −1.0, 0.0], [−0.2, 1.9, ·]]


def _reference(kind, old, mu, mask, cap):
    """Straight from the definitions, in float64 loops."""
    w = np.zeros(old.shape)
    for i in range(old.shape[0]):
        toks = [t for t in range(old.shape[1]) if mask[i, t]]
        log_rho = {t: float(old[i, t]) - float(mu[i, t]) for t in toks}
        seq = math.exp(sum(log_rho.values()))
        for t in toks:
            rho = math.exp(log_rho[t])
            if kind == "tis_token":
                w[i, t] = min(rho, cap)
            elif kind == "tis_sequence":
                w[i, t] = min(seq, cap)
            elif kind == "mis_token":
                w[i, t] = rho if 1 / cap <= rho <= cap else 0.0
            elif kind == "mis_sequence":
                w[i, t] = seq if 1 / cap <= seq <= cap else 0.0
            elif kind == "decoupled":
                w[i, t] = rho if rho <= cap else 0.0
    return w


@pytest.mark.parametrize("kind", CORRECTIONS.names())
@pytest.mark.parametrize("cap", [1.5, 2.0, 5.0])
def test_weights_equal_the_reference(kind, cap):
    w = np.asarray(correction_weights(kind, OLD, MU, MASK, cap=cap))
    np.testing.assert_allclose(w, _reference(kind, OLD, MU, MASK, cap), rtol=1e-6, atol=1e-7)
    assert w[1, 2] == 0.0 and np.isfinite(w).all()


def test_hand_computed_cases_at_cap_2():
    e = math.exp
    tis = np.asarray(correction_weights("tis_token", OLD, MU, MASK, cap=2.0))
    np.testing.assert_allclose(tis, [[e(0.5), e(-1.0), 1.0], [e(-0.2), 2.0, 0.0]], rtol=1e-6)
    # Masked IS drops exactly the tokens outside [1/2, 2]: e^-1 = 0.37 and e^1.9 = 6.7.
    mis = np.asarray(correction_weights("mis_token", OLD, MU, MASK, cap=2.0))
    assert (mis > 0).tolist() == [[True, False, True], [True, False, False]]
    # Sequence ratios: e^(0.5 − 1 + 0) = e^-0.5 (kept), e^(−0.2 + 1.9) = e^1.7 (dropped).
    mis_seq = np.asarray(correction_weights("mis_sequence", OLD, MU, MASK, cap=2.0))
    np.testing.assert_allclose(mis_seq, [[e(-0.5)] * 3, [0.0, 0.0, 0.0]], rtol=1e-6)
    tis_seq = np.asarray(correction_weights("tis_sequence", OLD, MU, MASK, cap=2.0))
    np.testing.assert_allclose(tis_seq, [[e(-0.5)] * 3, [2.0, 2.0, 0.0]], rtol=1e-6)
    # Decoupled PPO masks only above the cap (e^1.9); e^-1 keeps its weight.
    dec = np.asarray(correction_weights("decoupled", OLD, MU, MASK, cap=2.0))
    np.testing.assert_allclose(dec, [[e(0.5), e(-1.0), 1.0], [e(-0.2), 0.0, 0.0]], rtol=1e-6)


def test_on_policy_rows_get_weight_one():
    w = correction_weights("mis_sequence", OLD, OLD, MASK, cap=2.0)
    np.testing.assert_array_equal(np.asarray(w), MASK.astype(np.float32))


def test_huge_log_ratios_stay_finite():
    old = np.array([[0.0, 0.0]], np.float32)
    mu = np.array([[-300.0, -1e30]], np.float32)
    for kind in CORRECTIONS.names():
        w = np.asarray(correction_weights(kind, old, mu, np.ones((1, 2), bool), cap=3.0))
        assert np.isfinite(w).all() and (w <= 3.0 * (1 + 1e-6)).all(), kind


def test_stats_of_the_ratio_and_of_the_weights():
    s = correction_stats("mis_token", OLD, MU, MASK, cap=2.0)
    rho = np.exp([0.5, -1.0, 0.0, -0.2, 1.9])
    assert s["is/ratio_mean"] == pytest.approx(rho.mean(), rel=1e-6)
    assert s["is/ratio_max"] == pytest.approx(rho.max(), rel=1e-6)
    assert s["is/ratio_min"] == pytest.approx(rho.min(), rel=1e-6)
    assert s["is/ratio_p50"] == pytest.approx(np.median(rho), rel=1e-6)
    assert s["is/seq_ratio_mean"] == pytest.approx((math.exp(-0.5) + math.exp(1.7)) / 2, rel=1e-6)
    assert s["is/masked_frac"] == pytest.approx(2 / 5)
    t = correction_stats("tis_token", OLD, MU, MASK, cap=2.0)
    assert t["is/clipped_frac"] == pytest.approx(1 / 5)  # only e^1.9 is truncated
    assert "is/weight_mean" not in correction_stats("none", OLD, MU, MASK, cap=2.0)
    assert correction_stats("tis_token", OLD, MU, np.zeros_like(MASK), cap=2.0) == {}
