"""The select stage: every select.name is a scheduler behind one loop (`scheduling.select`)."""

import jax
import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.data.pipeline import prompt_batches
from rlvr_jax.data.sources import TaskSource
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rollout import Groups
from rlvr_jax.scheduling.select import Select
from rlvr_jax.testing import toy_tokenizer

TASK = tasks.get("arithmetic")


def _config(name, b=2, g=2, rounds=3):
    c = default_config()
    c.select.name, c.select.max_rounds = name, rounds
    c.select.pair.prefix_tokens = 4
    c.data.prompts_per_step, c.data.group_size = b, g
    c.task.name, c.task.train_size = "arithmetic", 64
    c.train.num_minibatches = 1
    validate(c)
    return c


def _select(c):
    prompts = prompt_batches(
        TaskSource(TASK, "train", size=c.task.train_size),
        batch_size=c.data.prompts_per_step,
        seed=0,
        group_size=c.data.group_size,
        shard_index=0,
        shard_count=1,
    )
    return Select(c, None, toy_tokenizer(), TASK, prompts, pad_id=0), prompts


def _fake_rollout(reward_of, seen):
    """A rollout whose row r of problem p has tokens [p-id, r] and reward reward_of(p, r)."""

    def rollout(request, key):
        seen.append((request, key))
        group = request.group_R
        rows = len(group)
        tokens = np.zeros((rows, 4), np.int32)
        tokens[:, 1] = [int(request.problems[g].id.split("/")[-1]) for g in group]
        tokens[:, 2] = np.arange(rows)
        tokens[:, 3] = 2
        attn = tokens > -1
        resp = np.zeros_like(attn)
        resp[:, 2:] = True
        rewards = np.array([reward_of(request.problems[g], r) for r, g in enumerate(group)])
        f = np.zeros((rows, 4), np.float32)
        return Groups(
            tokens=tokens,
            attention_mask=attn,
            prompt_mask=attn & ~resp,
            response_mask=resp,
            behaviour_logps=f - 1,
            entropy=f + 1,
            group=group,
            valid=np.ones(rows, bool),
            rewards=rewards.astype(np.float32),
            correct=rewards > 0.5,
            stopped=np.ones(rows, bool),
            reasons=["x"] * rows,
            problems=list(request.problems),
        )

    return rollout


def test_uniform_is_the_pipelines_next_batch_in_one_round():
    c = _config("uniform")
    sel, _ = _select(c)
    want = next(
        prompt_batches(TaskSource(TASK, "train", size=64), batch_size=2, seed=0, group_size=2)
    ).problems()
    seen = []
    key = jax.random.PRNGKey(3)
    groups, stats, fields = sel.step(key, _fake_rollout(lambda p, r: r % 2, seen))
    assert len(seen) == 1 and fields == {}
    request, round_key = seen[0]
    # The round is padded to a bucket of 8 rows (copies of row 0, dropped after sampling).
    assert [p.id for p in request.problems] == [p.id for p in want] + [want[0].id]
    np.testing.assert_array_equal(request.counts, [2, 2, 4])
    assert request.prefixes is None and request.max_new_tokens == c.rollout.max_new_tokens
    np.testing.assert_array_equal(round_key, jax.random.fold_in(key, 0))  # round 0's key
    assert [p.id for p in groups.problems] == [p.id for p in want]
    np.testing.assert_array_equal(groups.group, [0, 0, 1, 1])
    np.testing.assert_array_equal(groups.rewards, [0, 1, 0, 1])
    assert groups.valid.all()
    assert stats["select/rounds"] == 1 and stats["kept_groups"] == 2
    assert stats["pass_rate"] == 0.5 and stats["select/rollouts"] == 4


def test_dynamic_sampling_refills_from_the_stream_until_full():
    c = _config("dynamic_sampling", b=2, g=2, rounds=3)
    sel, _ = _select(c)
    stream = prompt_batches(TaskSource(TASK, "train", size=64), batch_size=2, seed=0)
    order = [p.id for _ in range(3) for p in next(stream).problems()]
    # The first prompt of the stream has all-equal rewards: dropped, one more is sampled.
    first = order[0]
    seen = []
    groups, stats, _ = sel.step(
        jax.random.PRNGKey(0),
        _fake_rollout(lambda p, r: 0.0 if p.id == first else float(r % 2), seen),
    )
    # Round 1 asks for the one missing group (2 rows, padded to 8 with copies of row 0).
    assert [list(r.counts) for r, _ in seen] == [[2, 2, 4], [8]]
    # Round 1 takes the first prompt of the next batch (the rest of it is skipped).
    assert seen[1][0].problems[0].id == order[2]
    assert [p.id for p in groups.problems] == [order[1], order[2]]
    assert groups.valid.all() and stats["select/rounds"] == 2 and stats["kept_groups"] == 2
    assert stats["select/effective_groups"] == 2 and stats["select/rollouts"] == 6


def test_dynamic_sampling_cap_pads_with_masked_rows():
    c = _config("dynamic_sampling", b=2, g=2, rounds=1)
    sel, _ = _select(c)
    groups, stats, _ = sel.step(jax.random.PRNGKey(0), _fake_rollout(lambda p, r: 0.0, []))
    assert groups.tokens.shape[0] == 4 and not groups.valid.any()
    assert stats["kept_groups"] == 0 and stats["select/rounds"] == 1


def test_dynamic_sampling_keeps_groups_by_verdict_not_by_shaped_rewards(caplog):
    # Every group is wrong (correct = reward > 0.5) but its shaped rewards differ.
    c = _config("dynamic_sampling", b=2, g=2, rounds=2)
    sel, _ = _select(c)
    groups, stats, _ = sel.step(jax.random.PRNGKey(0), _fake_rollout(lambda p, r: -0.25 * r, []))
    assert not groups.valid.any() and stats["kept_groups"] == 0
    # The cap was hit: logged as a metric and a warning.
    assert stats["select/cap_hit"] == 1 and stats["select/short_groups"] == 2
    assert "hit its cap" in caplog.text and "2 of 2 groups missing" in caplog.text
    # The old criterion (rewards not all equal) is an option.
    c.select.dynamic_sampling.keep = "reward"
    sel, _ = _select(c)
    groups, stats, _ = sel.step(jax.random.PRNGKey(0), _fake_rollout(lambda p, r: -0.25 * r, []))
    assert groups.valid.all() and stats["kept_groups"] == 2 and stats["select/cap_hit"] == 0


def test_dynamic_sampling_resamples_until_the_batch_is_full():
    c = _config("dynamic_sampling", b=2, g=2, rounds=20)
    sel, _ = _select(c)
    seen = []
    stream = prompt_batches(TaskSource(TASK, "train", size=64), batch_size=2, seed=0)
    order = [p.id for _ in range(8) for p in next(stream).problems()]
    mixed = set(order[5:])  # the first five prompts of the stream are all wrong

    def reward(p, r):
        return float(r % 2) if p.id in mixed else -0.25 * r

    groups, stats, _ = sel.step(jax.random.PRNGKey(0), _fake_rollout(reward, seen))
    assert groups.valid.all() and stats["kept_groups"] == 2 and stats["select/cap_hit"] == 0
    assert all(p.id in mixed for p in groups.problems) and stats["select/rounds"] > 2


def test_pair_declares_its_batch_fields_and_validate_names_the_scheduler():
    c = _config("pair")
    sel = Select(c, None, toy_tokenizer(), TASK, None, pad_id=0)
    assert sel.fields == ("incl_prob_B", "candidates_B")
    c = _config("uniform")
    c.credit.transforms = "pair"
    with pytest.raises(ValueError, match="'pair' scheduler.*config.select.name = 'pair'"):
        validate(c)
