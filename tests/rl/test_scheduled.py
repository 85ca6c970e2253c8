"""The stateful schedulers (SARA, VIGOR, PAIR, LEEPS, graph difficulty) in the RL trainer."""

import importlib.util
import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rlvr_jax.rl import build, credit
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rollout import score
from rlvr_jax.scheduling import SCHEDULERS, Pool, load_state, select
from rlvr_jax.scheduling.estimators import BetaEstimator, GraphEstimator
from rlvr_jax.scheduling.pair import remaining_token_prior
from rlvr_jax.testing import parity_score_rows, toy_tokenizer

ROOT = Path(__file__).resolve().parents[2] / "experiments"
CONFIGS = {
    "sara": "sara/sara.py",
    "vigor": "vigor/vigor.py",
    "pair": "pair/pair.py",
    "leeps": "leeps/leeps.py",
    "graph_difficulty": "graph_difficulty/sara_graph.py",
    "difficulty": "difficulty/difficulty.py",
}


def _experiment(slug: str, variant: str = "pulse"):
    spec = importlib.util.spec_from_file_location(slug, ROOT / CONFIGS[slug])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


def _parity_rewards(monkeypatch):
    """A random model never solves a task: reward each response by the parity of its tokens."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)


def _train_lines(workdir):
    lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


# ---------------------------------------------------------------------------- config


def test_every_scheduler_experiment_validates_in_every_variant():
    for slug in CONFIGS:
        for variant in ("", "arithmetic", "pulse"):
            c = _experiment(slug, variant)
            validate(c)
            assert c.select.name in SCHEDULERS
    assert _experiment("graph_difficulty").select.estimator == "graph"


def test_scheduler_sub_configs_hold_the_dataclass_defaults():
    c = default_config()
    assert c.select.sara.tau_commit == 0.45 and c.select.sara.probe == 2
    assert c.select.vigor.initial == 2 and c.select.pair.pi_min == 0.05
    assert "estimator" not in c.select.sara and "num_features" not in c.select.pair


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"select.name": "sarra"}, "valid: uniform, dynamic_sampling, difficulty, sara, vigor"),
        ({"select.name": "sara", "select.estimator": "gp"}, "valid: , beta, graph"),
        (
            {"select.name": "sara", "select.sara.tau_commit": 0.1},
            r"config.select.sara: SARA: need 0 <= tau_abandon < tau_commit",
        ),
        ({"select.name": "pair"}, "prefix_tokens = 64 must be below"),
        ({"credit.transforms": "pair"}, "needs config.select.name = 'pair'"),
        (
            {"select.name": "sara", "select.estimator": "graph", "select.graph.sweeps": 0},
            r"config.select.graph: GraphEstimator.sweeps = 0; must be >= 1",
        ),
        (
            {"select.name": "difficulty", "select.estimator": "graph", "select.graph.decay": 2.0},
            r"config.select.graph: GraphEstimator.decay = 2.0; must be in \(0, 1\]",
        ),
        (
            {"select.name": "sara", "select.estimator": "graph", "task.train_size": 10},
            "config.select.graph.neighbours = 10 must be below config.task.train_size = 10",
        ),
        (
            {"select.name": "pair", "select.pair.prior_remaining": -5.0},
            r"config.select.pair: PAIR.prior_remaining = -5.0; must be > 0",
        ),
    ],
)
def test_validate_rejects_bad_scheduler_fields(fields, message):
    c = default_config()
    for k, v in fields.items():
        section, name = k.split(".", 1)
        if "." in name:
            sub, leaf = name.split(".")
            c[section][sub][leaf] = v
        else:
            c[section][name] = v
    with pytest.raises(ValueError, match=message):
        validate(c)


def test_graph_estimator_settings_come_from_config_select_graph():
    c = default_config()
    c.select.name, c.select.estimator = "difficulty", "graph"
    settings = dict(
        num_states=3, neighbours=5, coupling=0.5, prior_strength=4.0, decay=0.8, sweeps=3, hops=1
    )
    for k, v in settings.items():
        c.select.graph[k] = v
    validate(c)
    assert select.build_scheduler(c).estimator == GraphEstimator(**settings)
    c.select.estimator = "beta"  # the graph settings apply to the graph estimator only
    assert select.build_scheduler(c).estimator == BetaEstimator()


# ------------------------------------------------------------------------ PAIR prior


class _Tokens:
    def encode(self, text):  # one token per character
        return list(range(len(text)))


class _Task:
    def __init__(self, solutions):
        self.solutions = solutions

    def problem(self, index, split):
        assert split == "train"
        return SimpleNamespace(solution=self.solutions[index % len(self.solutions)])


def test_remaining_token_prior_is_mean_reference_length_minus_prefix():
    # Lengths 2 + 1 and 6 + 1 (end of turn): mean 5; minus a 2-token prefix = 3.
    task = _Task(["ab", "abcdef"])
    assert remaining_token_prior(task, _Tokens(), 2, 64, num=2) == 3.0
    # Clipped to [1, L_max - prefix] ...
    assert remaining_token_prior(task, _Tokens(), 2, 4, num=2) == 2.0
    assert remaining_token_prior(task, _Tokens(), 9, 64, num=2) == 1.0
    # ... and the cap when the task has no reference solutions.
    assert remaining_token_prior(_Task([""]), _Tokens(), 16, 64) == 48.0


def test_pair_prior_field_zero_is_derived_else_used():
    c = default_config()
    c.select.name = "pair"
    c.select.pair.prefix_tokens = 16
    assert c.select.pair.prior_remaining == 0.0  # the default: derive from the task
    assert select.build_scheduler(c).prior_remaining == 48.0  # no task: L_max - prefix
    # With the run's task: its mean reference length (26 + 1) minus the 16-token prefix.
    task = _Task(["a" * 26])
    assert select.build_scheduler(c, task, _Tokens()).prior_remaining == 11.0
    c.select.pair.prior_remaining = 40.0
    assert select.build_scheduler(c, task, _Tokens()).prior_remaining == 40.0


def test_scheduled_select_derives_pair_prior_from_the_task():
    c = _experiment("pair")  # arithmetic, L_max = 16, prefix 4
    c.rollout.max_new_tokens, c.select.pair.prefix_tokens = 64, 4
    tok = toy_tokenizer()
    task = build.build_task(c)
    sel = select.Select(c, None, tok, task, None, pad_id=0)
    lengths = [len(tok.encode(task.problem(i, "train").solution)) + 1 for i in range(64)]
    assert sel.scheduler.prior_remaining == pytest.approx(np.mean(lengths) - 4)
    assert 1 < sel.scheduler.prior_remaining < 60


# ------------------------------------------------------------------------ PAIR credit


def test_pair_transform_matches_hand_computed_advantages():
    # Group 0: G = 4 candidates, 3 completed with π = 1, 0.5, 0.25; group 1: RLOO (π = 1).
    rewards = np.array([1, 0, 1, 1, 0, 0], np.float32)
    group = np.array([0, 0, 0, 1, 1, 2], np.int32)
    valid = np.array([1, 1, 1, 1, 1, 0], bool)
    incl = np.array([1, 0.5, 0.25, 1, 1, 1], np.float32)
    cands = np.array([4, 4, 4, 2, 2, 4], np.int32)
    mask = np.ones((6, 3), bool)
    mask[:, 2] = False
    batch = dict(
        rewards_B=rewards, group_B=group, valid_B=valid, incl_prob_B=incl, candidates_B=cands
    )
    batch["mask_BxT"] = mask
    adv = credit.apply_transforms(["pair"], np.zeros((6, 3), np.float32), batch, {"pair": {}})
    # Â_0 = (1-0)/(1·.5) / 3; Â_1 = ((0-1)/(.5·1) + (0-1)/(.5·.25)) / 3; Â_2 = (1-0)/(.25·.5) / 3.
    want = np.array([2 / 3, -10 / 3, 8 / 3, 1.0, -1.0, 0.0], np.float32)
    np.testing.assert_allclose(np.asarray(adv)[:, 0], want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv)[:, 1], want, rtol=1e-6)
    assert not np.asarray(adv)[:, 2].any()


def test_pair_transform_needs_the_inclusion_fields():
    batch = {"rewards_B": np.zeros(2), "mask_BxT": np.ones((2, 1), bool)}
    with pytest.raises(ValueError, match="incl_prob_B"):
        credit.apply_transforms(["pair"], np.zeros((2, 1)), batch, {"pair": {}})


# --------------------------------------------------------------------------- pulses


def _check_pulse(workdir, c):
    train = _train_lines(workdir)
    assert [x["step"] for x in train] == [1, 2]
    b, g = c.data.prompts_per_step, c.data.group_size
    for x in train:
        assert 0 < x["select/rollouts"] <= (c.select.max_rollouts or 2 * b * g)
        assert x["select/rounds"] <= c.select.max_rounds
        assert 0 <= x["pass_rate"] <= 1 and x["kept_groups"] >= 1
        assert np.isfinite(x["loss"])
    # PAIR continues a random subset, so one step may hold no informative pair.
    assert any(x["grad_norm"] > 0 for x in train)
    if c.select.name != "pair":
        assert all(0 < x["pass_rate"] < 1 and x["grad_norm"] > 0 for x in train)
    assert sorted(p.name for p in (Path(workdir) / "checkpoints").iterdir()) == ["1", "2"]
    assert sorted(p.name for p in (Path(workdir) / "scheduler").iterdir()) == ["1.npz", "2.npz"]
    assert (Path(workdir) / "export" / "model.safetensors").is_file()
    return train


@pytest.mark.slow
@pytest.mark.parametrize("slug", ["sara", "vigor", "pair", "leeps", "difficulty"])
def test_scheduler_has_a_pulse(slug, tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    c = _experiment(slug)
    c.eval.at_start = False
    trainer_lib.train(c, tmp_path)
    train = _check_pulse(tmp_path, c)
    b, g, l_max = c.data.prompts_per_step, c.data.group_size, c.rollout.max_new_tokens
    if slug == "vigor":  # exactly the B·G budget, spread over several rounds
        assert all(x["select/rollouts"] == b * g and x["select/rounds"] >= 2 for x in train)
    if slug == "pair":  # prefixes for all B·G candidates, continuations for some
        assert all(x["select/rollouts"] == b * g for x in train)
        assert all(x["select/tokens"] < b * g * l_max for x in train)
    if slug == "leeps":
        assert all(x["select/selected_groups"] == b for x in train)
    if slug == "difficulty":  # one round of B full groups
        assert all(x["select/rollouts"] == b * g and x["select/rounds"] == 1 for x in train)
        assert all(x["select/selected_groups"] == b for x in train)


def _sara_pulse(slug):
    c = _experiment(slug)
    c.eval.at_start = False
    return c


@pytest.mark.slow
def test_graph_difficulty_pulse_and_resume_equals_uninterrupted(tmp_path, monkeypatch):
    """SARA + graph difficulty (the richest state: kNN graph, mean-field posteriors): a 2-step
    pulse, then the same run preempted after step 1 and resumed: same model bits, metrics
    and scheduler state."""
    slug = "graph_difficulty"
    _parity_rewards(monkeypatch)
    straight = tmp_path / "straight"
    trainer_lib.train(_sara_pulse(slug), straight)
    _check_pulse(straight, _sara_pulse(slug))

    resumed = tmp_path / "resumed"
    original = trainer_lib.Trainer.update

    def preempt_at_step_0(self, batch, step):
        if step == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # the guard records it; the step finishes
        return original(self, batch, step)

    monkeypatch.setattr(trainer_lib.Trainer, "update", preempt_at_step_0)
    assert trainer_lib.train(_sara_pulse(slug), resumed) == {"preempted": True, "step": 1}
    monkeypatch.setattr(trainer_lib.Trainer, "update", original)
    trainer_lib.train(_sara_pulse(slug), resumed)

    a = (straight / "export" / "model.safetensors").read_bytes()
    b = (resumed / "export" / "model.safetensors").read_bytes()
    assert a == b
    drop = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s")
    clean = [
        [{k: v for k, v in x.items() if k not in drop} for x in _train_lines(d)]
        for d in (straight, resumed)
    ]
    assert clean[0] == clean[1]
    with (
        np.load(straight / "scheduler" / "2.npz") as f1,
        np.load(resumed / "scheduler" / "2.npz") as f2,
    ):
        assert f1.files == f2.files
        for k in f1.files:
            np.testing.assert_array_equal(f1[k], f2[k])
    # The saved file is the scheduler's state: it loads into the structure `init` builds.
    c = _sara_pulse(slug)
    emb = np.random.default_rng(0).normal(size=(c.task.train_size, 8))
    like = select.build_scheduler(c).init(Pool(c.task.train_size, emb), select.budget_of(c))
    state = load_state(str(resumed / "scheduler" / "1.npz"), like)
    assert int(state["step"]) == 1 and int(state["ledger"]["count"]) == 0
