"""`rollout.Groups`: trimming, padding and stacking rows."""

import numpy as np
import pytest

from rlvr_jax.rollout import Groups, stack_rows
from rlvr_jax.tasks.base import Problem


def make_groups(rewards_PxG, length=6):
    """Groups whose row r holds tokens r+1 (left-padded) and the given rewards."""
    rewards = np.asarray(rewards_PxG, np.float32)
    p, g = rewards.shape
    rows = p * g
    tokens = np.zeros((rows, length), np.int32)
    attn = np.zeros((rows, length), bool)
    attn[:, 2:] = True
    tokens[attn] = np.repeat(np.arange(rows) + 1, length - 2)
    resp = np.zeros((rows, length), bool)
    resp[:, 4:] = True
    f = np.zeros((rows, length), np.float32)
    return Groups(
        tokens=tokens,
        attention_mask=attn,
        prompt_mask=attn & ~resp,
        response_mask=resp,
        behaviour_logps=f - 1,
        entropy=f + 1,
        group=np.repeat(np.arange(p, dtype=np.int32), g),
        valid=np.ones(rows, bool),
        rewards=rewards.ravel(),
        correct=rewards.ravel() > 0.5,
        stopped=np.ones(rows, bool),
        reasons=["x"] * rows,
        problems=[Problem(id=f"p{i}", prompt="", answer="", solution="") for i in range(p)],
        info={"turns_B": np.arange(rows, dtype=np.int32)},
    )


def test_trim_drops_all_padding_columns_to_a_multiple():
    g = make_groups([[0, 1]], length=20)  # attention on columns 2..19
    t = g.trim(multiple=8)
    assert t.tokens.shape == (2, 24)  # 18 used columns, rounded up to 24 (left-padded)
    np.testing.assert_array_equal(t.tokens[:, -18:], g.tokens[:, 2:])
    assert t.attention_mask.sum() == g.attention_mask.sum()
    t4 = g.trim(multiple=2)
    assert t4.tokens.shape == (2, 18)
    np.testing.assert_array_equal(t4.response_mask, g.response_mask[:, 2:])
    np.testing.assert_array_equal(t4.behaviour_logps, g.behaviour_logps[:, 2:])


def test_pad_length_left_pads_and_refuses_to_shrink():
    g = make_groups([[0, 1]], length=6)
    p = g.pad_length(9)
    assert p.tokens.shape == (2, 9) and not p.attention_mask[:, :3].any()
    np.testing.assert_array_equal(p.tokens[:, 3:], g.tokens)
    with pytest.raises(ValueError, match="cannot pad"):
        g.pad_length(4)


def test_stack_rows_left_pads_rows_of_other_widths():
    a, b = make_groups([[1, 0]], length=6), make_groups([[0, 1]], length=8)
    rows = [a.row(1), b.row(0), b.row(1)]
    del rows[0]["reward"]  # a row without a verdict counts as reward 0, wrong
    out = stack_rows(rows, np.array([0, 1, 1]), np.array([True, True, False]), a.problems * 2)
    assert out.tokens.shape == (3, 8)
    np.testing.assert_array_equal(out.tokens[0], np.r_[0, 0, a.tokens[1]])
    np.testing.assert_array_equal(out.tokens[1:], b.tokens)
    np.testing.assert_array_equal(out.rewards, [0, 0, 1])
    np.testing.assert_array_equal(out.valid, [1, 1, 0])
    np.testing.assert_array_equal(out.info["turns_B"], [1, 0, 1])
    assert out.num_groups == 2 and out.reasons == ["x", "x", "x"]


def test_split_subgroups_makes_each_group_subgroup_pair_a_group():
    g = make_groups(np.zeros((2, 4)))
    assert g.split_subgroups() is g  # no sub-grouping: unchanged
    g.info["subgroup_B"] = np.array([0, 0, 1, 1, 0, 1, 1, 1])
    s = g.split_subgroups()
    np.testing.assert_array_equal(s.group, [0, 0, 1, 1, 2, 3, 3, 3])
    assert [p.id for p in s.problems] == ["p0", "p0", "p1", "p1"]
    assert "subgroup_B" not in s.info and "turns_B" in s.info
    np.testing.assert_array_equal(s.tokens, g.tokens)  # rows stay in place
    g.info["subgroup_B"] = np.array([0, 1, 0, 1, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="not contiguous"):
        g.split_subgroups()


def test_replace_rows_splices_other_rows_and_counts_work_off_the_batch():
    g = make_groups([[0, 0], [1, 0]], length=6)
    other = make_groups([[1, 1, 1]], length=8)
    other.tokens[:] = other.tokens + 100
    out = g.replace_rows([(1, 2), (3, 0)], other, off_batch=(3, 12))
    assert out.tokens.shape == (4, 8) and out.off_batch == (3, 12)
    np.testing.assert_array_equal(out.tokens[[1, 3]], other.tokens[[2, 0]])
    np.testing.assert_array_equal(out.tokens[[0, 2], 2:], g.tokens[[0, 2]])
    np.testing.assert_array_equal(out.rewards, [0, 1, 1, 1])
    np.testing.assert_array_equal(out.group, g.group)  # slots keep their group
    assert out.info == {} and g.off_batch == (0, 0)  # self unchanged
