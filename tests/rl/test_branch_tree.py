"""CBPO's tree credit: the layout read off the branching tree, independent of row order,
every path token credited exactly once (the tree's and the coincidental-prefix layouts)."""

import numpy as np
import pytest

from rlvr_jax.core import advantages as adv_lib
from rlvr_jax.core import cbpo
from rlvr_jax.rl.methods import task_signals
from rlvr_jax.rl.methods.branch_signals import tree_layout

# Group 0: roots 0, 1; ids 2, 3 branch from root 0 at 2; ids 4, 5 from root 0 at 4; id 6
# from root 1 at 1. Group 1: root 0, id 1 from it at 3.
GROUP = np.array([0] * 7 + [1] * 2)
IDS = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1])
PARENT = np.array([-1, -1, 0, 0, 0, 0, 1, -1, 0])
POS = np.array([0, 0, 2, 2, 4, 4, 1, 0, 3])
PATH_LEN = np.array([7, 5, 6, 7, 6, 8, 4, 6, 5])  # path length of each row (copy included)


def _layout(perm=None):
    perm = np.arange(len(GROUP)) if perm is None else perm
    return tree_layout(
        GROUP[perm], IDS[perm], PARENT[perm], POS[perm], np.ones(len(perm), bool), max_nodes=9
    )


def test_tree_layout_by_hand():
    member, pos, start, offset, shared = _layout()
    nodes = {(int(p), tuple(np.flatnonzero(m))) for m, p in zip(member, pos, strict=True) if p >= 0}
    assert nodes == {(2, (0, 2, 3)), (4, (0, 4, 5)), (1, (1, 6)), (3, (7, 8))}
    np.testing.assert_array_equal(start, POS)
    np.testing.assert_array_equal(offset, POS)
    want = np.zeros((9, 9), int)
    pairs = {(0, 2): 2, (0, 3): 2, (2, 3): 2, (0, 4): 4, (0, 5): 4, (4, 5): 4}
    pairs.update({(2, 4): 2, (2, 5): 2, (3, 4): 2, (3, 5): 2, (1, 6): 1, (7, 8): 3})
    for (a, b), n in pairs.items():
        want[a, b] = want[b, a] = n
    np.testing.assert_array_equal(shared, want)
    with pytest.raises(ValueError, match="branches from id 0, which is not a valid row"):
        valid = np.ones(9, bool)
        valid[7] = False
        tree_layout(GROUP, IDS, PARENT, POS, valid, max_nodes=9)


def _batch(perm, rewards):
    """Rows in `perm` order: each row's response is its own path (its copy is context)."""
    p = perm
    own = PATH_LEN[p] - POS[p]
    mask = np.arange(8)[None, :] < own[:, None]
    a = adv_lib.grpo_advantages(rewards[p], GROUP[p], 2)
    adv = np.where(mask, np.asarray(a)[:, None], 0.0).astype(np.float32)
    return adv, mask, rewards[p].astype(np.float32)


def _credits(perm, rewards):
    """{(row id in the unpermuted batch, path position): credit} of every masked token."""
    adv, mask, r = _batch(perm, rewards)
    member, pos, start, offset, shared = _layout(perm)
    out, _ = cbpo.cbpo_advantages(
        adv, mask, r, member, pos, start, valid_K=pos >= 0, offset_B=offset, shared_BxB=shared
    )
    out = np.asarray(out)
    return {
        (int(perm[i]), int(offset[i]) + t): float(out[i, t])
        for i in range(len(perm))
        for t in np.flatnonzero(mask[i])
    }


@pytest.mark.parametrize("seed", range(4))
def test_tree_credit_is_independent_of_row_order(seed):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, 9).astype(np.float64)
    rewards[:2] = [1, 0]  # group 0 varies
    base = _credits(np.arange(9), rewards)
    for _ in range(3):
        perm = rng.permutation(9)
        got = _credits(perm, rewards)
        assert got.keys() == base.keys()
        np.testing.assert_allclose([got[k] for k in base], list(base.values()), atol=1e-6)


def test_each_path_token_is_credited_once_with_the_mean_of_the_rows_through_it():
    rewards = np.array([1.0, 0, 1, 0, 0, 1, 1, 1, 0])
    credits = _credits(np.arange(9), rewards)
    _, mask, _ = _batch(np.arange(9), rewards)
    a = np.asarray(adv_lib.grpo_advantages(rewards, GROUP, 2))
    member, pos, _, _, shared = _layout()
    cbv, _ = cbpo.contrastive_branch_values(rewards, member, pos >= 0)
    factor = np.asarray(cbpo.branch_factors(cbv, pos >= 0))
    # Every (row, path position) of every row's path is held by exactly one row: the row
    # itself from its branch point on, its ancestors before it.
    for b in range(9):
        for p in range(PATH_LEN[b]):
            holders = [s for s in range(9) if (s == b or shared[b, s] > p) and (s, p) in credits]
            assert len(holders) == 1, (b, p, holders)
    # Root 0's tokens 0, 1 are on rows 0, 2, 3, 4, 5: the mean of their advantages; its
    # tokens 2, 3 on rows 0, 4, 5 (node at 2's segment: × its factor); 4.. on row 0 only.
    k2 = int(np.flatnonzero((pos == 2) & member[:, 0])[0])
    k4 = int(np.flatnonzero((pos == 4) & member[:, 0])[0])
    np.testing.assert_allclose(credits[(0, 0)], a[[0, 2, 3, 4, 5]].mean(), rtol=1e-5)
    np.testing.assert_allclose(credits[(0, 3)], factor[k2] * a[[0, 4, 5]].mean(), rtol=1e-5)
    np.testing.assert_allclose(credits[(0, 5)], factor[k4] * a[0], rtol=1e-5)
    np.testing.assert_allclose(credits[(2, 2)], factor[k2] * a[2], rtol=1e-5)
    # Continuation advantages keep their sign (a branch's own tokens are its alone).
    for b in np.flatnonzero(PARENT >= 0):
        assert np.sign(credits[(b, POS[b])]) == np.sign(a[b])
    assert mask.sum() == len(credits)


def test_coincidental_prefix_credit_is_independent_of_row_order():
    # The "branches" signal (independent samples that happen to share prefixes): which row
    # holds a shared prefix follows the row order, its credit does not.
    seqs = [[5, 6, 7, 2], [5, 6, 8, 2], [9, 2], [5, 6, 7, 3], [5, 2]]
    rewards = np.array([1.0, 0, 0, 1, 0])
    rng = np.random.default_rng(0)

    def credits(perm):
        s = [seqs[i] for i in perm]
        tokens = np.zeros((5, 4), np.int32)
        mask = np.zeros((5, 4), bool)
        for i, x in enumerate(s):
            tokens[i, : len(x)], mask[i, : len(x)] = x, True
        batch = {"tokens_BxT": tokens, "mask_BxT": mask, "group_B": np.zeros(5, np.int32)}
        f = task_signals.branches(None, None, batch, max_nodes=0, min_prefix=1,
                                  dedupe_prefix=True)  # fmt: skip
        a = np.asarray(adv_lib.grpo_advantages(rewards[perm], np.zeros(5, int), 1))
        adv = np.where(mask, a[:, None], 0.0)
        out, _ = cbpo.cbpo_advantages(
            adv, mask, rewards[perm], f["branch_member_KxB"], f["branch_pos_K"],
            f["branch_start_B"], valid_K=f["branch_pos_K"] >= 0, offset_B=f["branch_offset_B"],
            shared_BxB=f["branch_shared_BxB"],
        )  # fmt: skip
        out = np.asarray(out)
        held = {}
        for i, x in enumerate(s):
            for t in range(len(x)):
                if t >= f["branch_start_B"][i]:
                    key = tuple(x[: t + 1])
                    assert key not in held  # each trie token credited once
                    held[key] = float(out[i, t])
        return held

    base = credits(np.arange(5))
    assert len(base) == len({tuple(x[: t + 1]) for x in seqs for t in range(len(x))})
    a = np.asarray(adv_lib.grpo_advantages(rewards, np.zeros(5, int), 1))
    assert base[(5,)] == pytest.approx(a[[0, 1, 3, 4]].mean(), rel=1e-5)
    for _ in range(4):
        got = credits(rng.permutation(5))
        assert got.keys() == base.keys()
        np.testing.assert_allclose([got[k] for k in base], list(base.values()), atol=1e-6)
