"""Cliff kernel against a NumPy loop, hand cases, edge cases, properties and the locator map."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.cliff import (
    cliff_advantages,
    first_mistake_index,
    prefix_offsets,
    response_positions,
)
from rlvr_jax.tasks import arithmetic

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)
_cliff = jax.jit(cliff_advantages, static_argnames="scale")


def cliff_reference(adv, mask, correct, k, a=1.0, b=1.0, scale=True):
    out = np.where(mask, adv, 0.0).astype(np.float64)
    for i in range(adv.shape[0]):
        cols = [t for t in range(adv.shape[1]) if mask[i, t]]
        if correct[i] or k[i] < 0 or not cols:
            continue
        kk = min(k[i], len(cols) - 1)
        for j, t in enumerate(cols):
            mag = abs(adv[i, t]) if scale else 1.0
            out[i, t] = a * mag if j < kk else -b * mag
    return out


def _case(rng, b, t):
    mask = rng.random((b, t)) < 0.7
    adv = (rng.normal(size=b)[:, None] * np.ones((1, t))).astype(np.float32)
    correct = rng.random(b) < 0.4
    k = rng.integers(-1, t + 2, size=b).astype(np.int32)
    return adv, mask, correct, k


@pytest.mark.parametrize("shape", [(5, 7), (12, 16), (3, 1)])
@pytest.mark.parametrize("scale", [True, False])
def test_matches_numpy_loop(shape, scale):
    rng = np.random.default_rng(sum(shape))
    adv, mask, correct, k = _case(rng, *shape)
    got = _cliff(adv, mask, correct, k, a=0.7, b=1.3, scale=scale)
    np.testing.assert_allclose(got, cliff_reference(adv, mask, correct, k, 0.7, 1.3, scale), **TOL)


def test_hand_computed():
    mask = np.array([[0, 1, 1, 1, 1, 0]] * 4, bool)
    adv = np.array([-1.5, -1.5, 0.5, -1.5], np.float32)[:, None] * mask
    correct = np.array([False, False, True, False])
    k = np.array([2, -1, 1, 9], np.int32)
    got = np.asarray(_cliff(adv, mask, correct, k, a=2.0, b=0.5))
    want = [
        [0, 3, 3, -0.75, -0.75, 0],  # prefix +2·1.5, suffix −0.5·1.5
        [0, -1.5, -1.5, -1.5, -1.5, 0],  # no mistake located: A_i kept
        [0, 0.5, 0.5, 0.5, 0.5, 0],  # correct: unchanged
        [0, 3, 3, 3, -0.75, 0],  # index past the end: the last token is the mistake
    ]
    np.testing.assert_allclose(got, want, **TOL)


def test_edge_cases_no_nan():
    mask = np.array([[0, 0, 0], [0, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    adv = np.array([[np.nan, 0, 0], [0, -2.0, 0], [0, 0, 0], [1, 1, 1]], np.float32)
    correct = np.array([False, False, False, True])
    k = np.array([0, 0, 1, 0], np.int32)
    got = np.asarray(_cliff(adv, mask, correct, k, a=1.0, b=1.0, scale=True))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[0], 0.0)  # fully masked row (NaN padding ignored)
    np.testing.assert_allclose(got[1], [0, -2.0, 0])  # length 1, mistake at 0
    np.testing.assert_array_equal(got[2], 0.0)  # zero-variance group: |A_i| = 0
    np.testing.assert_array_equal(got[3], 1.0)  # correct
    unscaled = np.asarray(_cliff(adv, mask, correct, k, a=1.0, b=1.0, scale=False))
    np.testing.assert_allclose(unscaled[2], [1, -1, -1])  # all-wrong group gets signal


def test_response_positions_skip_gaps():
    pos, n = response_positions(np.array([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0]], bool))
    np.testing.assert_array_equal(pos, [[-1, 0, -1, 1, 2], [-1] * 5])
    np.testing.assert_array_equal(n, [3, 0])


@PROPS
@given(st.integers(0, 2**32 - 1), st.floats(0.1, 3.0), st.floats(0.1, 3.0))
def test_signs_and_magnitudes(seed, a, b):
    rng = np.random.default_rng(seed)
    adv, mask, correct, k = _case(rng, 6, 9)
    got = np.asarray(_cliff(adv, mask, correct, k, a=a, b=b))
    pos, n = (np.asarray(x) for x in response_positions(mask))
    for i in range(6):
        m = mask[i]
        if correct[i] or k[i] < 0:
            np.testing.assert_array_equal(got[i][m], adv[i][m])
            continue
        kk = min(k[i], n[i] - 1)
        pre, suf = m & (pos[i] < kk), m & (pos[i] >= kk)
        assert (got[i][pre] >= 0).all() and (got[i][suf] <= 0).all()
        np.testing.assert_allclose(np.abs(got[i][pre]), a * np.abs(adv[i][pre]), rtol=1e-6)
        np.testing.assert_allclose(np.abs(got[i][suf]), b * np.abs(adv[i][suf]), rtol=1e-6)


def test_locator_span_maps_to_token_index():
    # Multi-character "tokens": offsets from prefix decodes, index = token_span's first token.
    task = arithmetic.ArithmeticTask()
    problem = task.problem(0)
    lines = problem.solution.split("\n")
    a, rest = lines[1].split(" = ")
    lines[1] = f"{a} = {int(rest) + 1}"  # an arithmetic mistake in step 1
    response = "\n".join(lines)
    pieces = [response[i : i + 3] for i in range(0, len(response), 3)]
    ids = list(range(len(pieces)))
    offsets = prefix_offsets(lambda xs: "".join(pieces[i] for i in xs), ids)
    assert offsets[0] == (0, 3) and offsets[-1][1] == len(response)
    check = task.first_wrong_step(problem, response)
    assert check.index == 1
    k = first_mistake_index(check.char_span, offsets)
    assert k == arithmetic.token_span(check.char_span, offsets)[0]
    assert offsets[k][0] <= check.char_span[0] < offsets[k][1]
    assert response[: check.char_span[0]] == "\n".join(lines[:1]) + "\n"
    assert first_mistake_index(None, offsets) == -1
    assert first_mistake_index((len(response), len(response)), offsets) == len(offsets)
