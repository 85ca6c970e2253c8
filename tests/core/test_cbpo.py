"""CBPO kernels against NumPy loops, hand cases, edge cases, sign preservation and segments."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.cbpo import (
    branch_factors,
    cbpo_advantages,
    contrastive_branch_values,
    shared_prefix_advantages,
)

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)
_cbpo = jax.jit(cbpo_advantages)


def shared_reference(adv, mask, shared, offset):
    b, t_n = adv.shape
    row = [adv[s][mask[s]].mean() if mask[s].any() else 0.0 for s in range(b)]
    out = np.zeros(adv.shape)
    for i in range(b):
        p = offset[i]
        for t in range(t_n):
            if not mask[i, t]:
                continue
            sharers = [s for s in range(b) if s != i and shared[i, s] > p]
            out[i, t] = (adv[i, t] + sum(row[s] for s in sharers)) / (1 + len(sharers))
            p += 1
    return out


def cbpo_reference(
    adv, mask, rewards, member, pos, start, valid, s_min=0.1, s_max=3.0, offset=None, shared=None
):
    k_n, b = member.shape
    offset = np.zeros(b, int) if offset is None else offset
    if shared is not None:
        adv = shared_reference(adv, mask, shared, offset)
    cbv = np.zeros(k_n)
    for k in range(k_n):
        rs = [float(rewards[i]) for i in range(b) if member[k, i] and valid[k]]
        if len(rs) > 1:
            cbv[k] = np.std(rs)
    vs = [cbv[k] for k in range(k_n) if valid[k]]
    mean = sum(vs) / max(len(vs), 1)
    factor = np.clip(cbv / (mean + 1e-6), s_min, s_max) if mean > 0 else np.ones(k_n)
    out = np.zeros(adv.shape)
    node = -np.ones(adv.shape, int)
    for i in range(b):
        n = offset[i]
        for t in range(adv.shape[1]):
            if not mask[i, t]:
                continue
            best = -1
            for k in range(k_n):
                if valid[k] and member[k, i] and pos[k] <= n and (best < 0 or pos[k] > pos[best]):
                    best = k
            node[i, t] = best
            if n >= start[i]:
                out[i, t] = adv[i, t] * (factor[best] if best >= 0 else 1.0)
            n += 1
    return out, node, cbv


def _case(rng, b, t, k_n):
    mask = rng.random((b, t)) < 0.8
    adv = rng.normal(size=(b, t)).astype(np.float32)
    rewards = rng.integers(0, 2, b).astype(np.float32)
    member = rng.random((k_n, b)) < 0.4
    pos = rng.permutation(t)[:k_n].astype(np.int32) if k_n <= t else rng.integers(0, t, k_n)
    pos = np.asarray(pos, np.int32)
    start = np.where(rng.random(b) < 0.5, 0, rng.integers(0, t, b)).astype(np.int32)
    valid = rng.random(k_n) < 0.85
    return adv, mask, rewards, member, pos, start, valid


@pytest.mark.parametrize("shape", [(6, 8, 3), (12, 16, 5), (2, 1, 1)])
def test_matches_numpy_loop(shape):
    rng = np.random.default_rng(sum(shape))
    adv, mask, rewards, member, pos, start, valid = _case(rng, *shape)
    got, node = _cbpo(adv, mask, rewards, member, pos, start, valid_K=valid)
    want, want_node, want_cbv = cbpo_reference(adv, mask, rewards, member, pos, start, valid)
    np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_array_equal(node, want_node)
    cbv, _ = contrastive_branch_values(rewards, member, valid)
    np.testing.assert_allclose(cbv, want_cbv, **TOL)


@pytest.mark.parametrize("shape", [(6, 8, 3), (9, 12, 4)])
def test_offsets_and_shared_prefixes_match_numpy_loop(shape):
    rng = np.random.default_rng(7 + sum(shape))
    adv, mask, rewards, member, pos, start, valid = _case(rng, *shape)
    b, t, _ = shape
    offset = np.where(rng.random(b) < 0.5, 0, rng.integers(0, t, b)).astype(np.int32)
    shared = rng.integers(0, 2 * t, (b, b)).astype(np.int32)
    shared = np.minimum(shared, shared.T)
    kw = dict(valid_K=valid, offset_B=offset, shared_BxB=shared)
    got, node = _cbpo(adv, mask, rewards, member, pos, start, **kw)
    want, want_node, _ = cbpo_reference(
        adv, mask, rewards, member, pos, start, valid, offset=offset, shared=shared
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(node, want_node)
    np.testing.assert_allclose(
        shared_prefix_advantages(adv, mask, shared, offset),
        shared_reference(adv, mask, shared, offset), rtol=1e-5, atol=1e-6,
    )  # fmt: skip
    # Nobody shares anything: every token keeps its own advantage.
    none = shared_prefix_advantages(adv, mask, np.zeros((b, b), np.int32), offset)
    np.testing.assert_allclose(none, np.where(mask, adv, 0), **TOL)


def test_shared_prefix_hand_case():
    # Parent row 0 (A = 1) with a branch row 1 (A = −2) from path position 2 (its first
    # response token sits at path position 2: offset 2). Row 0's tokens 0, 1 are shared:
    # (1 − 2) / 2 = −.5; its tokens 2.. and all of row 1's are theirs alone.
    adv = np.array([[1.0] * 4, [-2.0, -2.0, 0, 0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    shared = np.array([[0, 2], [2, 0]], np.int32)
    got = shared_prefix_advantages(adv, mask, shared, np.array([0, 2]))
    np.testing.assert_allclose(got, [[-0.5, -0.5, 1, 1], [-2, -2, 0, 0]], **TOL)


def test_hand_computed():
    # Parent row 0 (reward 1) with nodes at response tokens 1 and 3.
    # Node 0 group: rows 0, 1 (rewards 1, 0): CBV .5.  Node 1 group: rows 0, 2 (1, 1): CBV 0.
    # mean CBV .25 → factors clip(2) = 2 and clip(0) = s_min = .1.
    # Row 0: token 0 before any node (×1), tokens 1-2 node 0 (×2), tokens 3-4 node 1 (×.1).
    # Row 1 branches at 1: token 0 is the parent's (0), tokens 1.. node 0 (×2).
    # Row 2 branches at 3: tokens 0-2 are the parent's, 3-4 node 1 (×.1).
    adv = np.array([[1.0] * 5, [-1.0] * 5, [1.0] * 5], np.float32)
    mask = np.ones((3, 5), bool)
    rewards = np.array([1.0, 0.0, 1.0], np.float32)
    member = np.array([[1, 1, 0], [1, 0, 1]], bool)
    pos = np.array([1, 3], np.int32)
    start = np.array([0, 1, 3], np.int32)
    got, node = _cbpo(adv, mask, rewards, member, pos, start, valid_K=np.ones(2, bool))
    want = [[1, 2, 2, 0.1, 0.1], [0, -2, -2, -2, -2], [0, 0, 0, 0.1, 0.1]]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(node, [[-1, 0, 0, 1, 1], [-1, 0, 0, 0, 0], [-1, -1, -1, 1, 1]])
    np.testing.assert_allclose(contrastive_branch_values(rewards, member)[0], [0.5, 0.0])


def test_edge_cases_no_nan():
    adv = np.array([[np.nan, 0.0], [2.0, 0.0], [1.0, 1.0]], np.float32)
    mask = np.array([[0, 0], [1, 0], [1, 1]], bool)
    rewards = np.array([1.0, 1.0, 1.0], np.float32)  # all correct: every CBV 0
    member = np.array([[0, 1, 1]], bool)
    got, _ = _cbpo(adv, mask, rewards, member, np.array([0]), np.zeros(3, np.int32),
                   valid_K=np.ones(1, bool))  # fmt: skip
    got = np.asarray(got)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, [[0, 0], [2, 0], [1, 1]])  # factors 1, masked row 0
    np.testing.assert_allclose(branch_factors(np.zeros(3)), 1.0)
    with pytest.raises(ValueError, match="s_min"):
        branch_factors(np.zeros(3), s_min=0.0)


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_signs_kept_and_segments_partition_each_path(seed):
    rng = np.random.default_rng(seed)
    adv, mask, rewards, member, pos, start, valid = _case(rng, 6, 8, 3)
    got, node = (np.asarray(x) for x in _cbpo(adv, mask, rewards, member, pos, start,
                                                valid_K=valid))  # fmt: skip
    kept = got != 0
    assert (np.sign(got[kept]) == np.sign(adv[kept])).all()
    # Every response token has exactly one owner: the latest node on its path (or none).
    for i in range(6):
        n = np.cumsum(mask[i]) - 1
        for t in np.flatnonzero(mask[i]):
            owners = [k for k in range(3) if valid[k] and member[k, i] and pos[k] <= n[t]]
            want = max(owners, key=lambda k: (pos[k], -k)) if owners else -1
            assert node[i, t] == want


def test_zero_sum_per_group_by_hand_and_against_numpy():
    from rlvr_jax.core.cbpo import zero_sum_per_group

    # Group 0: tokens +2, +1 | −0.5 (P = 3, N = .5): positives × 1.75/3, negatives × 1.75/.5.
    # Group 1: only positives: unchanged.
    adv = np.array([[2.0, 1.0, 9.0], [-0.5, 0.0, 0.0], [0.3, 0.3, 0.0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 0]], bool)
    group = np.array([0, 0, 1])
    out = np.asarray(zero_sum_per_group(adv, mask, group, 3))
    np.testing.assert_allclose(out[0], [2 * 1.75 / 3, 1 * 1.75 / 3, 0.0], rtol=1e-6)
    np.testing.assert_allclose(out[1], [-0.5 * 1.75 / 0.5, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(out[2], [0.3, 0.3, 0], rtol=1e-6)
    assert abs(out[:2].sum()) < 1e-6
    # Random: every mixed group sums to 0, signs never change, total |A| kept per group.
    rng = np.random.default_rng(3)
    a = rng.normal(size=(12, 7)).astype(np.float32)
    m = rng.random((12, 7)) < 0.7
    g = rng.integers(0, 4, 12)
    o = np.asarray(zero_sum_per_group(a, m, g, 12))
    assert (np.sign(o[m]) == np.sign(a[m])).all() and (o[~m] == 0).all()
    for k in range(4):
        rows = g == k
        np.testing.assert_allclose(o[rows][m[rows]].sum(), 0.0, atol=1e-5)
        np.testing.assert_allclose(
            np.abs(o[rows][m[rows]]).sum(), np.abs(a[rows][m[rows]]).sum(), rtol=1e-5
        )
