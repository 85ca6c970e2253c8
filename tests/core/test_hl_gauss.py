import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import hl_gauss
from rlvr_jax.models.heads import CategoricalValueHead


# --------------------------------------------------------------- NumPy references (loops)
def _phi(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _ref_hl_gauss(ys, num_bins, v_min, v_max, ratio=0.75):
    edges = np.linspace(v_min, v_max, num_bins + 1)
    sigma = ratio * (v_max - v_min) / num_bins
    out = np.zeros((len(ys), num_bins))
    for i, y in enumerate(ys):
        y = min(max(y, v_min), v_max)
        z = _phi((v_max - y) / sigma) - _phi((v_min - y) / sigma)
        for m in range(num_bins):
            out[i, m] = (_phi((edges[m + 1] - y) / sigma) - _phi((edges[m] - y) / sigma)) / z
    return out


def _ref_two_hot(ys, centers):
    out = np.zeros((len(ys), len(centers)))
    for i, y in enumerate(ys):
        y = min(max(y, centers[0]), centers[-1])
        k = min(int(np.searchsorted(centers, y, side="right")) - 1, len(centers) - 2)
        frac = (y - centers[k]) / (centers[k + 1] - centers[k])
        out[i, k] += 1 - frac
        out[i, k + 1] += frac
    return out


def _ref_ece(p, o, k):
    n = len(p)
    total = 0.0
    for b in range(k):
        sel = [i for i in range(n) if min(int(p[i] * k), k - 1) == b]
        if sel:
            total += len(sel) / n * abs(np.mean(o[sel]) - np.mean(p[sel]))
    return total


# ----------------------------------------------------------------------------- tests
def test_support_is_the_value_heads():
    e1, c1 = hl_gauss.support(7, -1.0, 2.0)
    e2, c2 = CategoricalValueHead.support(7, -1.0, 2.0)
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(hl_gauss.bin_values("bernoulli", 7, -1.0, 2.0), [-1.0, 2.0])
    with pytest.raises(ValueError, match="valid"):
        hl_gauss.bin_values("gauss", 7, 0.0, 1.0)


@pytest.mark.parametrize("num_bins,v_min,v_max", [(11, 0.0, 1.0), (51, -10.0, 10.0), (3, -1, 2)])
def test_hl_gauss_matches_reference(num_bins, v_min, v_max):
    rng = np.random.default_rng(num_bins)
    ys = np.concatenate([rng.uniform(v_min - 1, v_max + 1, 20), [v_min, v_max]]).astype(np.float32)
    got = hl_gauss.targets(ys, "hl_gauss", num_bins=num_bins, v_min=v_min, v_max=v_max)
    want = _ref_hl_gauss(ys.astype(np.float64), num_bins, v_min, v_max)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got).sum(-1), 1.0, atol=1e-6)


def test_hl_gauss_hand_computed():
    # 2 bins on [0, 2] (width 1, σ = .75), y = 1 (the middle): symmetric → (.5, .5).
    np.testing.assert_allclose(
        hl_gauss.targets(np.float32(1.0), "hl_gauss", num_bins=2, v_min=0.0, v_max=2.0),
        [0.5, 0.5],
        atol=1e-7,
    )
    # y = 0: bin 0 holds Φ(1/.75) − Φ(0), bin 1 Φ(2/.75) − Φ(1/.75), normalised by Φ(2/.75) − .5.
    a, b = _phi(4 / 3) - 0.5, _phi(8 / 3) - _phi(4 / 3)
    got = hl_gauss.targets(np.float32(0.0), "hl_gauss", num_bins=2, v_min=0.0, v_max=2.0)
    np.testing.assert_allclose(got, [a / (a + b), b / (a + b)], rtol=1e-6)


def test_controls_match_reference():
    rng = np.random.default_rng(3)
    ys = np.concatenate([rng.uniform(-2, 3, 30), [-1.0, 2.0, 0.5]]).astype(np.float32)
    edges, centers = hl_gauss.support(6, -1.0, 2.0)
    got = hl_gauss.targets(ys, "two_hot", num_bins=6, v_min=-1.0, v_max=2.0)
    np.testing.assert_allclose(got, _ref_two_hot(ys, centers.astype(np.float64)), atol=1e-6)
    oh = np.asarray(hl_gauss.targets(ys, "one_hot", num_bins=6, v_min=-1.0, v_max=2.0))
    for y, row in zip(ys, oh, strict=True):
        want = min(max(int(np.floor((y + 1.0) / 0.5)), 0), 5)
        assert row.argmax() == want and row.sum() == 1
    be = hl_gauss.targets(ys, "bernoulli", num_bins=6, v_min=-1.0, v_max=2.0)
    q = np.clip((ys + 1) / 3, 0, 1)
    np.testing.assert_allclose(be, np.stack([1 - q, q], -1), atol=1e-6)


@pytest.mark.parametrize("kind", ["two_hot", "bernoulli"])
def test_decoded_targets_recover_the_value(kind):
    # two-hot and Bernoulli are exact: decoding the target gives back y (inside the support).
    ys = np.linspace(-0.75, 1.75, 9).astype(np.float32)
    p = np.asarray(hl_gauss.targets(ys, kind, num_bins=6, v_min=-1.0, v_max=2.0))
    v = hl_gauss.bin_values(kind, 6, -1.0, 2.0)
    logits = np.log(np.maximum(p, 1e-30))
    np.testing.assert_allclose(hl_gauss.decode_value(logits, v), ys, atol=1e-5)


def test_cross_entropy_and_decode_match_reference():
    rng = np.random.default_rng(4)
    b, t, m = 3, 5, 7
    logits = rng.normal(size=(b, t, m)).astype(np.float32)
    probs = rng.dirichlet(np.ones(m), (b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.6
    mask[0] = False
    logits[~mask] = np.nan  # padding may hold anything
    got = hl_gauss.cross_entropy(logits, probs, mask)
    _, centers = hl_gauss.support(m, 0.0, 1.0)
    dec = np.asarray(hl_gauss.decode_value(np.where(mask[..., None], logits, 0), centers))
    for i in range(b):
        for j in range(t):
            if not mask[i, j]:
                assert got[i, j] == 0
                continue
            z = logits[i, j].astype(np.float64)
            logp = z - z.max() - np.log(np.sum(np.exp(z - z.max())))
            np.testing.assert_allclose(got[i, j], -np.sum(probs[i, j] * logp), rtol=1e-6)
            np.testing.assert_allclose(dec[i, j], np.exp(logp) @ centers, rtol=1e-6, atol=1e-6)


def test_cross_entropy_minimised_by_the_target():
    # ∂CE/∂logits = softmax(logits) − p: zero at logits = log p.
    p = np.asarray(hl_gauss.targets(np.float32([0.3]), "hl_gauss", num_bins=9, v_min=0, v_max=1))
    g = jax.grad(lambda z: hl_gauss.cross_entropy(z, p[None], np.ones((1, 1), bool)).sum())(
        np.log(np.maximum(p, 1e-30))[None].astype(np.float32)
    )
    np.testing.assert_allclose(g, 0.0, atol=1e-6)


def test_brier_and_ece_match_reference_and_hand_values():
    rng = np.random.default_rng(5)
    p = rng.random(40).astype(np.float32)
    p[:3] = [0.0, 1.0, 0.1]
    o = (rng.random(40) < p).astype(np.float32)
    mask = rng.random(40) < 0.8
    np.testing.assert_allclose(
        hl_gauss.brier_score(p, o, mask), np.mean((p[mask] - o[mask]) ** 2), rtol=1e-6
    )
    np.testing.assert_allclose(
        hl_gauss.expected_calibration_error(p, o, mask, num_bins=5),
        _ref_ece(p[mask], o[mask], 5),
        rtol=1e-5,
        atol=1e-7,
    )
    # Hand: p = (.2, .2, .9, .9), o = (0, 1, 1, 1), 10 bins → |.5 − .2|·.5 + |1 − .9|·.5 = .2;
    # Brier (.04 + .64 + .01 + .01)/4.
    p4, o4 = np.float32([0.2, 0.2, 0.9, 0.9]), np.float32([0, 1, 1, 1])
    np.testing.assert_allclose(
        hl_gauss.expected_calibration_error(p4, o4, np.ones(4, bool)), 0.2, rtol=1e-6
    )
    np.testing.assert_allclose(hl_gauss.brier_score(p4, o4, np.ones(4)), 0.70 / 4, rtol=1e-6)
    # Nothing masked in: 0, no NaN.
    assert hl_gauss.brier_score(p4, o4, np.zeros(4)) == 0
    assert hl_gauss.expected_calibration_error(p4, o4, np.zeros(4)) == 0


@settings(max_examples=25, deadline=None)
@given(st.floats(-5, 5), st.sampled_from([2, 5, 17, 40]), st.sampled_from(list(hl_gauss.KINDS[:3])))
def test_targets_are_distributions_with_mean_near_y(y, num_bins, kind):
    v_min, v_max = -2.0, 3.0
    p = np.asarray(
        hl_gauss.targets(np.float32(y), kind, num_bins=num_bins, v_min=v_min, v_max=v_max),
        np.float64,
    )
    assert np.all(p >= 0) and abs(p.sum() - 1) < 1e-5
    _, c = hl_gauss.support(num_bins, v_min, v_max)
    width = (v_max - v_min) / num_bins
    yc = min(max(y, v_min), v_max)
    # Each kind's mean lies within a bin (+ the truncation shift, < σ) of the clipped target.
    assert abs(p @ c - yc) <= width * (1.0 if kind != "hl_gauss" else 1.5) + 1e-5
