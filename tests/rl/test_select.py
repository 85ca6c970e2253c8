import numpy as np
import pytest

from rlvr_jax.rl.rollout import Groups, concat, pad_groups
from rlvr_jax.rl.select import collect_groups
from rlvr_jax.tasks.base import Problem


def make_groups(rewards_PxG, length=6, start=0):
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
        logps=f - 1,
        entropy=f + 1,
        group=np.repeat(np.arange(p, dtype=np.int32), g),
        valid=np.ones(rows, bool),
        rewards=rewards.ravel(),
        correct=rewards.ravel() > 0.5,
        stopped=np.ones(rows, bool),
        reasons=["x"] * rows,
        problems=[Problem(id=f"p{start + i}", prompt="", answer="", solution="") for i in range(p)],
    )


def test_informative_and_take_groups_renumber():
    g = make_groups([[0, 0], [1, 0], [1, 1], [0, 1]])
    np.testing.assert_array_equal(g.informative(), [False, True, False, True])
    sub = g.take_groups(np.array([3, 1]))
    assert [p.id for p in sub.problems] == ["p3", "p1"]
    np.testing.assert_array_equal(sub.group, [0, 0, 1, 1])
    np.testing.assert_array_equal(sub.rewards, [0, 1, 1, 0])
    np.testing.assert_array_equal(sub.tokens[:, -1], [7, 8, 3, 4])


def test_concat_and_pad_groups():
    a, b = make_groups([[0, 1]], length=6), make_groups([[1, 0], [1, 1]], length=8, start=1)
    both = concat([a, b])
    assert both.tokens.shape == (6, 8)
    np.testing.assert_array_equal(both.group, [0, 0, 1, 1, 2, 2])
    # Left padding keeps each row's tokens at the end, masks padded columns out.
    np.testing.assert_array_equal(both.attention_mask[0], [0, 0, 0, 0, 1, 1, 1, 1])
    padded = pad_groups(both, 5, 2)
    assert padded.num_groups == 5 and padded.tokens.shape == (10, 8)
    np.testing.assert_array_equal(padded.valid, [1] * 6 + [0] * 4)
    np.testing.assert_array_equal(padded.group, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    with pytest.raises(ValueError, match="exceed"):
        pad_groups(both, 2, 2)


def test_trim_drops_all_padding_columns_to_a_multiple():
    g = make_groups([[0, 1]], length=20)  # attention on columns 2..19
    t = g.trim(multiple=8)
    assert t.tokens.shape == (2, 24)  # 18 used columns, rounded up to 24 (left-padded)
    np.testing.assert_array_equal(t.tokens[:, -18:], g.tokens[:, 2:])
    assert t.attention_mask.sum() == g.attention_mask.sum()
    t4 = g.trim(multiple=2)
    assert t4.tokens.shape == (2, 18)
    np.testing.assert_array_equal(t4.response_mask, g.response_mask[:, 2:])


def _draws(batches):
    it = iter(batches)
    return lambda r: next(it)


def test_uniform_takes_one_round_as_is():
    g = make_groups([[0, 0], [1, 0]])
    out, stats = collect_groups(_draws([g]), num_groups=2, group_size=2, mode="uniform")
    assert out.num_groups == 2 and out.valid.all()
    assert stats["zero_variance_groups"] == 0.5 and stats["rounds"] == 1
    assert stats["pass_rate"] == 0.25


def test_dynamic_sampling_refills_until_full():
    r1 = make_groups([[0, 0], [1, 0], [1, 1]])
    r2 = make_groups([[0, 1], [1, 1], [1, 0]], start=3)
    out, stats = collect_groups(
        _draws([r1, r2]), num_groups=3, group_size=2, mode="dynamic_sampling", max_rounds=3
    )
    assert [p.id for p in out.problems] == ["p1", "p3", "p5"]
    assert out.valid.all() and stats["rounds"] == 2 and stats["kept_groups"] == 3
    assert stats["sampled_groups"] == 6 and stats["zero_variance_groups"] == 3 / 6


def test_dynamic_sampling_cap_pads_with_masked_groups():
    r = make_groups([[0, 0], [1, 0]])
    out, stats = collect_groups(
        _draws([r, r]), num_groups=2, group_size=2, mode="dynamic_sampling", max_rounds=2
    )
    assert stats["rounds"] == 2 and stats["kept_groups"] == 2
    r = make_groups([[0, 0], [1, 1]])
    out, stats = collect_groups(
        _draws([r]), num_groups=2, group_size=2, mode="dynamic_sampling", max_rounds=1
    )
    assert out.num_groups == 2 and not out.valid.any() and stats["kept_groups"] == 0
    r = make_groups([[0, 0], [0, 1]])
    out, _ = collect_groups(
        _draws([r]), num_groups=2, group_size=2, mode="dynamic_sampling", max_rounds=1
    )
    np.testing.assert_array_equal(out.valid, [1, 1, 0, 0])
