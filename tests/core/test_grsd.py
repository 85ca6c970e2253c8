"""GRSD's kernel against a NumPy loop, hand cases (turns, clip), and sign preservation."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.grsd import grsd_advantages, turn_gaps, turn_ids

_grsd = jax.jit(grsd_advantages)


def reference(adv, lt, ls, mask, lam=1.0, w_min=0.5, w_max=2.0):
    out = np.zeros(adv.shape)
    for i in range(adv.shape[0]):
        t = 0
        while t < adv.shape[1]:
            if not mask[i, t]:
                t += 1
                continue
            end = t
            while end < adv.shape[1] and mask[i, end]:
                end += 1
            gap = np.mean(lt[i, t:end] - ls[i, t:end])
            for u in range(t, end):
                w = np.clip(np.exp(lam * np.sign(adv[i, u]) * gap), w_min, w_max)
                out[i, u] = w * adv[i, u]
            t = end
    return out


def _case(rng, b, t):
    mask = rng.random((b, t)) < 0.7
    adv = np.where(rng.random((b, t)) < 0.1, 0.0, rng.normal(size=(b, t))).astype(np.float32)
    ls = -rng.random((b, t)).astype(np.float32) * 3
    lt = (ls + rng.normal(0, 0.5, (b, t))).astype(np.float32)
    return adv, lt, ls, mask


@pytest.mark.parametrize("shape", [(5, 9), (3, 1), (8, 16)])
def test_matches_numpy_loop(shape):
    rng = np.random.default_rng(sum(shape))
    adv, lt, ls, mask = _case(rng, *shape)
    for kw in (dict(), dict(lam=2.0, w_min=0.8, w_max=1.5)):
        got, _ = _grsd(adv, lt, ls, mask, **kw)
        np.testing.assert_allclose(got, reference(adv, lt, ls, mask, **kw), rtol=1e-5, atol=1e-6)


def test_turns_and_gaps_by_hand():
    # Row 0: two turns (columns 1-2 and 4), an environment token between them.
    mask = np.array([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(turn_ids(mask), [[-1, 0, 0, -1, 1], [0, 0, 0, 0, 0]])
    ls = np.zeros((2, 5), np.float32)
    lt = np.array([[9, 1.0, 3.0, 9, -1.0], [1, 1, 1, 1, 6]], np.float32)
    np.testing.assert_allclose(turn_gaps(lt, ls, mask), [[0, 2, 2, 0, -1], [2, 2, 2, 2, 2]])
    # Turn 0: gap 2 → w = clip(e², ., 2) = 2 for A > 0, clip(e⁻²) = .5 for A < 0; turn 1:
    # gap −1 → e⁻¹ = .368 → .5 for A > 0.
    adv = np.array([[0, 1.0, -1.0, 0, 1.0], [0.5] * 5], np.float32)
    got, w = grsd_advantages(adv, lt, ls, mask)
    np.testing.assert_allclose(got, [[0, 2, -0.5, 0, 0.5], [1.0] * 5], rtol=1e-6)
    np.testing.assert_allclose(grsd_advantages(adv, lt, ls, mask, lam=0.0)[0], adv * mask)
    with pytest.raises(ValueError, match="w_min"):
        grsd_advantages(adv, lt, ls, mask, w_min=0.0)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_no_advantage_changes_sign(seed):
    rng = np.random.default_rng(seed)
    adv, lt, ls, mask = _case(rng, 4, 7)
    got, w = (np.asarray(x) for x in grsd_advantages(adv, lt, ls, mask, lam=3.0))
    m = mask & (adv != 0)
    assert (np.sign(got[m]) == np.sign(adv[m])).all() and (got[~mask] == 0).all()
    assert ((w[mask] >= 0.5) & (w[mask] <= 2.0)).all()
