"""Cue-GRPO kernel against a NumPy loop, hand cases, edge cases and positive-mass conservation."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.cue import cue_ids, cue_rarity_advantages, cue_rarity_scales

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)


@functools.partial(jax.jit, static_argnames="missing_cue_singleton")
def _cue(adv, mask, group, cue, valid, alpha, missing_cue_singleton=False):
    return cue_rarity_advantages(
        adv,
        mask,
        group,
        cue,
        alpha=alpha,
        missing_cue_singleton=missing_cue_singleton,
        valid_B=valid,
    )


def cue_reference(adv, mask, group, cue, valid, alpha, singleton=False):
    b = adv.shape[0]
    m = mask.astype(np.float64)
    a_seq = [(adv[i] * m[i]).sum() / max(m[i].sum(), 1) for i in range(b)]
    pos = [valid[i] and a_seq[i] > 0 for i in range(b)]
    scale = np.ones(b)
    for g in set(group.tolist()):
        rows = [i for i in range(b) if group[i] == g and pos[i]]
        if not rows:
            continue
        w = {}
        for i in rows:
            if singleton and cue[i] < 0:
                size = 1
            else:
                size = sum(1 for j in rows if cue[j] == cue[i] and not (singleton and cue[j] < 0))
            w[i] = size ** (-alpha)
        mass = sum(a_seq[i] for i in rows)
        wmass = sum(w[i] * a_seq[i] for i in rows)
        for i in rows:
            scale[i] = w[i] * mass / wmass
    return np.where(mask, adv, 0.0) * scale[:, None]


def _case(rng, b, t, groups):
    group = rng.integers(0, groups, b).astype(np.int32)
    mask = rng.random((b, t)) < 0.7
    adv = (rng.normal(size=b)[:, None] * (1 + 0.1 * rng.random((b, t)))).astype(np.float32)
    cue = rng.integers(-1, 3, b).astype(np.int32)
    valid = rng.random(b) < 0.9
    return adv, mask, group, cue, valid


@pytest.mark.parametrize("shape", [(8, 5, 2), (16, 9, 5), (3, 1, 1)])
@pytest.mark.parametrize("singleton", [False, True])
def test_matches_numpy_loop(shape, singleton):
    rng = np.random.default_rng(sum(shape))
    adv, mask, group, cue, valid = _case(rng, *shape)
    got = _cue(adv, mask, group, cue, valid, 0.7, singleton)
    want = cue_reference(adv, mask, group, cue, valid, 0.7, singleton)
    np.testing.assert_allclose(got, want, **TOL)


def test_hand_computed():
    # One group: 3 correct rows with cues A, A, B (A = +1 each), one wrong row (−3).
    # α = 1: w = 1/2, 1/2, 1; mass 3, weighted mass 2 → scales 3/4, 3/4, 3/2.
    adv = np.array([1.0, 1.0, 1.0, -3.0], np.float32)[:, None] * np.ones((1, 2), np.float32)
    mask = np.ones((4, 2), bool)
    group = np.zeros(4, np.int32)
    cue = np.array([0, 0, 1, -1], np.int32)
    got = np.asarray(_cue(adv, mask, group, cue, np.ones(4, bool), 1.0))
    np.testing.assert_allclose(got[:, 0], [0.75, 0.75, 1.5, -3.0], **TOL)
    scale, size = cue_rarity_scales(adv[:, 0], group, cue)
    np.testing.assert_array_equal(size, [2, 2, 1, 0])
    # α = 0 is GRPO.
    np.testing.assert_allclose(_cue(adv, mask, group, cue, np.ones(4, bool), 0.0), adv, **TOL)


def test_missing_cue_cluster_choice():
    adv = np.ones((3, 1), np.float32)
    mask = np.ones((3, 1), bool)
    group, cue, valid = np.zeros(3, np.int32), np.array([-1, -1, 5], np.int32), np.ones(3, bool)
    shared = np.asarray(_cue(adv, mask, group, cue, valid, 1.0, False))[:, 0]
    single = np.asarray(_cue(adv, mask, group, cue, valid, 1.0, True))[:, 0]
    np.testing.assert_allclose(shared, [0.75, 0.75, 1.5], **TOL)  # w = 1/2, 1/2, 1
    np.testing.assert_allclose(single, [1.0, 1.0, 1.0], **TOL)  # three singletons


def test_edge_cases_no_nan():
    t = 3
    mask = np.ones((6, t), bool)
    mask[5] = False
    adv = np.zeros((6, t), np.float32)
    adv[2:4] = 1.0  # group 1: two positive rows with the same cue
    adv[4] = -1.0  # group 2: all wrong
    adv[5] = np.nan  # fully masked row
    group = np.array([0, 0, 1, 1, 2, 3], np.int32)
    cue = np.array([0, 1, 0, 0, -1, 2], np.int32)
    got = np.asarray(_cue(adv, mask, group, cue, np.ones(6, bool), 1.0))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[:2], 0.0)  # zero-variance group
    np.testing.assert_allclose(got[2:4], 1.0)  # one cluster: rarity changes nothing
    np.testing.assert_allclose(got[4], -1.0)  # negatives unchanged
    np.testing.assert_array_equal(got[5], 0.0)
    # Length-1 responses and a group of one.
    ones, zeros = np.ones((1, 1), np.float32), np.zeros(1, np.int32)
    one = np.asarray(_cue(ones, ones > 0, zeros, zeros, np.ones(1, bool), 1.0))
    np.testing.assert_allclose(one, [[1.0]])


def test_cue_ids():
    assert cue_ids(["1,0", None, "0,1", "1,0"]) == [0, -1, 1, 0]


@PROPS
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 3.0))
def test_positive_mass_conserved_and_signs_kept(seed, alpha):
    rng = np.random.default_rng(seed)
    adv, mask, group, cue, valid = _case(rng, 10, 4, 3)
    mask[:, 0] = True
    got = np.asarray(_cue(adv, mask, group, cue, valid, alpha))
    a_in = (adv * mask).sum(1) / mask.sum(1)
    a_out = (got * mask).sum(1) / mask.sum(1)
    pos = valid & (a_in > 0)
    for g in range(3):
        rows = pos & (group == g)
        np.testing.assert_allclose(a_out[rows].sum(), a_in[rows].sum(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[~pos], np.where(mask, adv, 0)[~pos])
    assert (np.sign(got) == np.sign(np.where(mask, adv, 0))).all()
