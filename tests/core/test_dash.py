"""DASH kernel against a NumPy loop, hand cases, edge cases and properties."""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.dash import dash_advantages, dash_aggregate, dash_horizons

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)


@functools.partial(jax.jit, static_argnames=("h_min", "h_max"))
def _dash(teacher, student, mask, gamma, kappa, h_min=1, h_max=8):
    return dash_advantages(
        teacher, student, mask, gamma=gamma, h_min=h_min, h_max=h_max, kappa=kappa
    )


def dash_reference(teacher, student, mask, gamma, kappa, h_min, h_max):
    b, t = mask.shape
    adv = np.zeros((b, t))
    hor = np.zeros((b, t), int)
    for i in range(b):
        cols = [j for j in range(t) if mask[i, j]]
        d = [float(teacher[i, j]) - float(student[i, j]) for j in cols]
        if not d:
            continue
        mean = sum(d) / len(d)
        for n, j in enumerate(cols):
            gate = 2.0 / (1.0 + math.exp(-kappa * abs(d[n] - mean))) - 1.0
            h = h_min + int(np.round(gate * (h_max - h_min)))
            hor[i, j] = h
            adv[i, j] = sum(gamma**k * d[n + k] for k in range(h) if n + k < len(d))
    return adv, hor


@pytest.mark.parametrize("shape", [(4, 9), (7, 20), (3, 1)])
@pytest.mark.parametrize("h", [(1, 1), (2, 6)])
def test_matches_numpy_loop(shape, h):
    rng = np.random.default_rng(sum(shape) + h[1])
    mask = rng.random(shape) < 0.75
    teacher = rng.normal(-1.0, 1.0, shape).astype(np.float32)
    student = rng.normal(-1.0, 1.0, shape).astype(np.float32)
    teacher[~mask] = -np.inf  # padding must not leak
    adv, hor = _dash(teacher, student, mask, 0.8, 1.5, h_min=h[0], h_max=h[1])
    want_adv, want_hor = dash_reference(teacher, student, mask, 0.8, 1.5, *h)
    np.testing.assert_array_equal(hor, want_hor)
    np.testing.assert_allclose(adv, want_adv, **TOL)


def test_hand_computed():
    # d = [1, 0, 0, 3] on response tokens (a masked gap between the 2nd and 3rd), mean 1.
    # gaps |d − mean| = [0, 1, 1, 2]; κ = 1: gate = [0, .4621, .4621, .7616];
    # H_min 1, H_max 3: H = 1 + round(2·gate) = [1, 2, 2, 3].
    # γ = .5: a = [1, 0 + .5·0, 0 + .5·3, 3] = [1, 0, 1.5, 3].
    mask = np.array([[1, 1, 0, 1, 1]], bool)
    student = np.zeros((1, 5), np.float32)
    teacher = np.array([[1.0, 0.0, 9.0, 0.0, 3.0]], np.float32)
    adv, hor = _dash(teacher, student, mask, 0.5, 1.0, h_min=1, h_max=3)
    np.testing.assert_array_equal(hor, [[1, 2, 0, 2, 3]])
    np.testing.assert_allclose(adv, [[1.0, 0.0, 0.0, 1.5, 3.0]], **TOL)
    gap, gate, _ = dash_horizons(teacher - student, mask, h_min=1, h_max=3, kappa=1.0)
    np.testing.assert_allclose(gap, [[0, -1, 0, -1, 2]], **TOL)
    np.testing.assert_allclose(gate[0, [1, 4]], [np.tanh(0.5), np.tanh(1.0)], **TOL)


def test_edge_cases_no_nan():
    mask = np.array([[0, 0, 0], [0, 1, 0], [1, 1, 1]], bool)
    teacher = np.array([[np.nan, -np.inf, 0], [0, -0.5, 0], [-1, -1, -1]], np.float32)
    student = np.array([[0, 0, 0], [0, -1.0, 0], [-1, -1, -1]], np.float32)
    adv, hor = _dash(teacher, student, mask, 0.9, 1.0, h_min=1, h_max=8)
    adv = np.asarray(adv)
    assert np.isfinite(adv).all()
    np.testing.assert_array_equal(adv[0], 0.0)  # fully masked row
    np.testing.assert_allclose(adv[1], [0, 0.5, 0])  # length 1: a = d
    np.testing.assert_array_equal(adv[2], 0.0)  # teacher = student
    np.testing.assert_array_equal(np.asarray(hor)[2], 1)  # zero gap: H_min
    with pytest.raises(ValueError, match="h_min"):
        dash_horizons(teacher, mask, h_min=3, h_max=2)


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_plain_opsd_limit_and_gap_skipping(seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((3, 10)) < 0.6
    d = rng.normal(size=(3, 10)).astype(np.float32)
    zeros = np.zeros_like(d)
    # H_min = H_max = 1 is plain OPSD: a_t = d_t.
    a, _ = _dash(d, zeros, mask, 0.9, 2.0, h_min=1, h_max=1)
    np.testing.assert_allclose(a, np.where(mask, d, 0), **TOL)
    # Masked gaps cost nothing: the compacted rows give the same values.
    a, _ = _dash(d, zeros, mask, 0.9, 2.0, h_min=2, h_max=5)
    for i in range(3):
        n = mask[i].sum()
        dc = np.zeros((1, 10), np.float32)
        dc[0, :n] = d[i][mask[i]]
        mc = np.arange(10)[None] < n
        ac, _ = _dash(dc, np.zeros_like(dc), mc, 0.9, 2.0, h_min=2, h_max=5)
        np.testing.assert_allclose(np.asarray(a)[i][mask[i]], np.asarray(ac)[0, :n], **TOL)


def test_aggregate_with_given_horizons():
    mask = np.ones((1, 4), bool)
    d = np.array([[1.0, 2.0, 4.0, 8.0]], np.float32)
    h = np.array([[4, 1, 2, 3]], np.int32)
    a = dash_aggregate(d, h, mask, gamma=0.5, h_max=4)
    np.testing.assert_allclose(a, [[1 + 1 + 1 + 1, 2, 4 + 4, 8]], **TOL)
