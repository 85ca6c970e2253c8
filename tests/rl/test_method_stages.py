"""Pulses of the method stages of issue 12 item 7: each shows its defining quantity moving.

LEEPS re-embeds its pool with the current policy; Cliff's noisy locator moves
located mistakes; OM-GRPO / TTRL train on the unlabeled eval prompts; RLSD and
H²SD's self-teacher log their informativeness every step.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.scheduling import select
from rlvr_jax.scheduling.leeps import knn, neighbour_overlap
from rlvr_jax.tokenizers import encode_prompt

from .test_method_experiments import load
from .test_trainer import _parity_rewards


def _train_lines(tmp_path):
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


@pytest.mark.slow
def test_leeps_refresh_uses_the_current_policy(tmp_path):
    c = load("leeps/leeps", "pulse")
    c.select.leeps.refresh_every = 2
    t = trainer_lib.Trainer.from_config(c, tmp_path)
    sched = t.parts.selector
    before = sched.state["leeps"]["nbr"].copy()
    n = c.task.train_size
    prompts = [encode_prompt(t.parts.tokenizer, sched._problem(i).prompt) for i in range(n)]
    # Move the policy's weights in place, as the trainer's _sync_model does each step.
    params = nnx.state(t.parts.model, nnx.Param)
    keys = iter(jax.random.split(jax.random.PRNGKey(1), len(jax.tree.leaves(params))))
    nnx.update(
        t.parts.model,
        jax.tree.map(lambda x: x + 0.3 * jax.random.normal(next(keys), x.shape, x.dtype), params),
    )
    sched.state["step"] = np.asarray(1, np.int32)
    assert sched._refresh_neighbours() == {}  # not a refresh step
    sched.state["step"] = np.asarray(2, np.int32)
    stats = sched._refresh_neighbours()
    embeddings = select.prompt_embeddings(t.parts.model, prompts, t.parts.pad_id)
    want = knn(embeddings, c.select.leeps.neighbours)
    np.testing.assert_array_equal(sched.state["leeps"]["nbr"], want)
    overlap = stats["select/leeps_neighbour_overlap"]
    assert overlap == neighbour_overlap(before, want) and overlap < 1.0
    t.io.close()


@pytest.mark.slow
def test_leeps_pulse_logs_each_refresh(tmp_path):
    c = load("leeps/leeps", "pulse")
    c.select.leeps.refresh_every = 1
    c.eval.at_start = False
    trainer_lib.train(c, tmp_path)
    train = _train_lines(tmp_path)
    assert "select/leeps_neighbour_overlap" not in train[0]  # step 0: the initial neighbours
    assert 0.0 <= train[1]["select/leeps_neighbour_overlap"] <= 1.0


@pytest.mark.slow
def test_cliff_noisy_pulse_moves_located_mistakes(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    c = load("cliff/cliff_noisy", "pulse")
    c.score.first_mistake.error_rate = 1.0
    c.eval.at_start = False
    trainer_lib.train(c, tmp_path)
    for x in _train_lines(tmp_path):
        assert x["first_mistake/located_frac"] > 0  # random text: mistakes everywhere
        assert x["first_mistake/moved_frac"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["om_grpo/ttrl", "om_grpo/om_grpo"])
def test_test_time_training_trains_on_the_eval_prompts(name, tmp_path, monkeypatch):
    seen = []
    original = trainer_lib.Trainer.rollout

    def rollout(self, request, key):
        groups = original(self, request, key)
        seen.extend(p.id for p in groups.problems)
        return groups

    monkeypatch.setattr(trainer_lib.Trainer, "rollout", rollout)
    c = load(name, "pulse+ttt")
    trainer_lib.train(c, tmp_path)
    ids = {f"arithmetic/test/{i}" for i in range(c.eval.num_problems)}
    assert seen and set(seen) <= ids  # only the eval prompts, no train-split prompt
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if x["split"] == "eval"] == [0, 2]  # before and after
    if name == "om_grpo/ttrl":
        for x in _train_lines(tmp_path):
            assert 0 <= x["ttrl/label_accuracy"] <= 1 and 0 <= x["ttrl/reward_accuracy"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["h2sd/rlsd", "h2sd/h2sd"])
def test_self_teacher_pulse_logs_its_informativeness(name, tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    batches = []
    original = trainer_lib.Trainer.credit

    def keep(self, batch, step, num_groups):
        b = original(self, batch, step, num_groups)
        batches.append(b)
        return b

    monkeypatch.setattr(trainer_lib.Trainer, "credit", keep)
    c = load(name, "pulse")
    c.eval.at_start = False
    trainer_lib.train(c, tmp_path)
    for x in _train_lines(tmp_path):
        assert 0 <= x["hint/noise_frac"] <= 1
        assert 0 <= x["hint/sign_agree_balanced"] <= 1 and x["hint/located_rows"] > 0
    if name == "h2sd/rlsd":  # the teacher rescales tokens: A'_t ≠ A_i somewhere, same signs
        for b in batches:
            m = b["mask_BxT"]
            adv = b["adv_BxT"]
            row = np.where(m, adv, 0).sum(-1) / np.maximum(m.sum(-1), 1)
            moved = np.abs(adv - row[:, None])[m]
            assert moved.max() > 1e-3
            assert (np.sign(adv[m]) == np.sign(np.broadcast_to(row[:, None], adv.shape)[m])).all()


def test_test_split_training_needs_a_label_free_reward_and_uniform_selection():
    from rlvr_jax.rl import config as config_lib

    c = config_lib.default_config()
    c.task.train_split = "test"
    with pytest.raises(ValueError, match="label-free"):
        config_lib.validate(c)  # GRPO on the verifier's rewards would train on test labels
    c.score.signals = "answers,majority_vote"
    config_lib.validate(c)
    c.select.name = "dynamic_sampling"
    with pytest.raises(ValueError, match="uniform"):
        config_lib.validate(c)
    c.select.name = "uniform"
    c.task.train_split = "dev"
    with pytest.raises(ValueError, match="task.train_split"):
        config_lib.validate(c)
    for name in ("om_grpo/om_grpo", "om_grpo/om_grpo_contrast", "om_grpo/ttrl"):
        ttt = load(name, "arithmetic+ttt")
        config_lib.validate(ttt)
        assert ttt.task.train_split == ttt.eval.split == "test"
        assert ttt.task.train_size == ttt.eval.num_problems and ttt.task.name == "arithmetic"
