"""End-to-end runs of the RL trainer on a tiny random model (the baselines' `:pulse` variant)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import default_config
from rlvr_jax.rollout import Request, score
from rlvr_jax.testing import parity_score_rows

from .test_config import BASELINES, load_experiment

ROOT = Path(__file__).resolve().parents[2]


def _train_lines(workdir):
    lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"], [x for x in lines if x["split"] == "eval"]


def _check_pulse(workdir, result):
    train, evals = _train_lines(workdir)
    assert [x["step"] for x in train] == [1, 2]
    for x in train:
        assert "loss" not in x or np.isfinite(x["loss"])
        assert 0 <= x["pass_rate"] <= 1 and x["response_len"] > 0
    assert [x["step"] for x in evals] == [0, 2]
    assert 0 <= result["pass@1"] <= result["pass@2"] <= 1
    assert (Path(workdir) / "export" / "model.safetensors").is_file()
    assert "before RL" in (Path(workdir) / "results.md").read_text()
    assert (Path(workdir) / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (Path(workdir) / "checkpoints").iterdir()) == ["1", "2"]


def _parity_rewards(monkeypatch):
    """A random model never solves a task: reward each row by the parity of its tokens instead,
    so that groups differ and every baseline's update (and DAPO's filter) really runs."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)


@pytest.mark.parametrize("name", [b for b in BASELINES if b != "grpo"])
def test_baseline_has_a_pulse(name, tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    result = trainer_lib.train(load_experiment(name, "pulse"), tmp_path)
    _check_pulse(tmp_path, result)
    train, _ = _train_lines(tmp_path)
    assert all(0 < x["pass_rate"] < 1 for x in train)
    assert all(x["grad_norm"] > 0 for x in train if "loss" in x)
    if name == "ppo":
        assert all(np.isfinite(x["value_loss"]) for x in train)
        assert "loss" not in train[0] and "loss" in train[1]  # critic warm-up step
    if name == "dapo":
        assert all(x["kept_groups"] == 4 for x in train)
        assert all(x["select/effective_groups"] == 4 for x in train)


def test_cli_runs_grpo_pulse_with_overrides(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "rlvr_jax.main",
        "--config=experiments/baselines/grpo.py:pulse",
        f"--workdir={tmp_path}",
        "--config.loss.ppo_clip.eps_high=0.3",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout[out.stdout.index("{") :])
    _check_pulse(tmp_path, result)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["loss"]["ppo_clip"]["eps_high"] == 0.3
    assert "step 2/2 [100%]" in out.stderr


def test_cli_rejects_unknown_field(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "rlvr_jax.main",
        "--config=experiments/baselines/grpo.py:pulse",
        f"--workdir={tmp_path}",
        "--config.loss.eps_hgih=0.3",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "eps_hgih" in out.stderr


def _pulse():
    c = load_experiment("grpo", "pulse")
    c.train.steps = 3
    c.eval.at_start = False
    return c


def test_preempted_and_resumed_run_equals_uninterrupted(tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    trainer_lib.train(_pulse(), straight)

    resumed = tmp_path / "resumed"
    original = trainer_lib.Trainer.update

    def preempt_at_step_1(self, batch, step):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the guard records it; the step finishes
        return original(self, batch, step)

    monkeypatch.setattr(trainer_lib.Trainer, "update", preempt_at_step_1)
    out = trainer_lib.train(_pulse(), resumed)
    assert out == {"preempted": True, "step": 2}
    assert not (resumed / "export").exists()
    monkeypatch.setattr(trainer_lib.Trainer, "update", original)
    trainer_lib.train(_pulse(), resumed)

    a = (straight / "export" / "model.safetensors").read_bytes()
    b = (resumed / "export" / "model.safetensors").read_bytes()
    assert a == b  # bitwise: same prompts, keys, minibatch order and optimizer state
    drop = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s")
    clean = [
        [{k: v for k, v in x.items() if k not in drop} for x in _train_lines(d)[0]]
        for d in (straight, resumed)
    ]
    assert clean[0] == clean[1]


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = trainer_lib.Trainer.credit

    def poison_step_2(self, batch, step, num_groups):
        batch = original(self, batch, step, num_groups)
        if step == 1:
            batch = batch.replace(adv_BxT=np.full_like(batch.adv_BxT, np.nan))
        return batch

    monkeypatch.setattr(trainer_lib.Trainer, "credit", poison_step_2)
    with pytest.raises(FloatingPointError, match=r"step 2.*checkpoint \(step 1\) is intact"):
        trainer_lib.train(_pulse(), tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1"]
    train, _ = _train_lines(tmp_path)
    assert [x["step"] for x in train] == [1]


def test_rerun_with_a_different_algorithm_is_refused(tmp_path):
    c = _pulse()
    c.train.steps = 1
    trainer_lib.train(c, tmp_path)
    c = _pulse()
    c.loss.ppo_clip.eps_high = 0.5
    with pytest.raises(ValueError, match=r"loss.ppo_clip.eps_high: 0.2 -> 0.5"):
        trainer_lib.Trainer.from_config(c, tmp_path)


def test_default_config_is_the_countdown_warm_start():
    c = default_config()
    assert (c.model.source, c.model.domain, c.task.name) == ("warm_start", "countdown", "countdown")


def _score_one_step(tmp_path, **loss):
    """One rollout of the pulse config scored by the trainer, the policy moved off the reference."""
    c = load_experiment("grpo", "pulse")
    c.loss.recompute_old_logps = True  # old log-probs under the moved policy
    for k, v in loss.items():
        c.loss[k] = v
    t = trainer_lib.Trainer.from_config(c, tmp_path)
    moved = jax.tree.map(lambda p: p * 1.05, t.state.params)
    t.state = t.state.replace(params=moved)
    t._sync_model()
    problems = t.parts.task.problems(2, "train")
    groups = t.rollout(Request(problems, np.array([2, 2])), jax.random.PRNGKey(0))
    batch = t.score(groups, {}, step=0)
    t.io.close()
    return groups.trim(32), batch


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_in_the_reward_uses_the_configured_estimator(kind, tmp_path):
    g, b = _score_one_step(tmp_path, kl_reward_coef=0.5, kl_kind=kind, kl_clamp=0.0)
    m = b.mask_BxT
    d = np.where(m, b.old_logps_BxT.astype(np.float64) - b.ref_logps_BxT, 0.0)
    kl = {"k1": d, "k2": 0.5 * d**2, "k3": np.exp(-d) + d - 1}[kind]
    want = g.rewards - 0.5 * np.where(m, kl, 0.0).sum(-1)
    assert np.abs(d).max() > 1e-3  # the policy really moved off the reference
    np.testing.assert_allclose(b.rewards_B, want, rtol=1e-5, atol=1e-5)


def test_validation_problems_are_evaluated_once_after_the_last_step(tmp_path, monkeypatch):
    """`eval.validation_problems` adds the validation split's evaluation to the final
    record only (val/...), on that split and size; the test-split keys stay as they were."""
    calls, original = [], trainer_lib.Trainer.evaluate

    def spy(self, split="", num_problems=0):
        out = original(self, split, num_problems)
        problems = self.parts.task.problems(num_problems or self.c.eval.num_problems,
                                            split or self.c.eval.split)  # fmt: skip
        calls.append((split, num_problems, [p.id for p in problems], out["pass@1"]))
        return out

    monkeypatch.setattr(trainer_lib.Trainer, "evaluate", spy)
    c = _pulse()
    c.eval.validation_problems = 3
    result = trainer_lib.train(c, tmp_path)
    assert [(s, n) for s, n, _, _ in calls] == [("", 0), ("validation", 3)]
    assert all(i.split("/")[1] == "validation" for i in calls[1][2]) and len(calls[1][2]) == 3
    _, evals = _train_lines(tmp_path)
    assert [x["step"] for x in evals] == [3]
    assert evals[0]["val/pass@1"] == calls[1][3] == result["val/pass@1"]
    assert evals[0]["pass@1"] == calls[0][3]
    c.eval.validation_problems = -1
    with pytest.raises(ValueError, match="eval.validation_problems"):
        trainer_lib.train(c, tmp_path / "bad")


@pytest.mark.slow
def test_a_paper_suite_is_evaluated_with_the_test_split(tmp_path):
    """eval.suite: the math suite's fixture benchmarks are evaluated before and after RL and
    every eval.suite_every steps, logged per benchmark, cached per problem."""
    c = _pulse()
    c.train.steps = 3
    c.eval.every = 1
    c.eval.suite_every = 2  # steps 0, 2 and the last (3), not 1
    c.eval.at_start = True
    c.eval.suite = "math"
    c.eval.suite_data = str(ROOT / "tests" / "eval" / "fixtures" / "data")
    c.eval.suite_n_samples = 2
    c.eval.suite_ks = "1,2"
    c.eval.suite_num_problems = 1
    c.eval.suite_max_new_tokens = 8
    trainer_lib.train(c, tmp_path)
    _, evals = _train_lines(tmp_path)
    assert [x["step"] for x in evals] == [0, 1, 2, 3]
    assert "suite/average/pass@1" not in evals[1]
    for x in evals[:1] + evals[2:]:
        for bench in ("aime24", "math500"):
            assert 0 <= x[f"suite/{bench}/pass@1"] <= x[f"suite/{bench}/pass@2"] <= 1
        assert "suite/average/pass@1" in x
    cached = sorted(p.name for p in (tmp_path / "eval_suite" / "math").iterdir())
    assert "aime24.jsonl" in cached and "math500.jsonl" in cached


def test_a_suite_without_its_data_directory_is_refused():
    c = default_config()
    c.eval.suite = "math"
    with pytest.raises(ValueError, match="config.eval.suite_data"):
        trainer_lib.build_parts(c, "/nonexistent/never")
    c.eval.suite = "maths"
    with pytest.raises(ValueError, match="config.eval.suite"):
        trainer_lib.build_parts(c, "/nonexistent/never")
    c.eval.suite, c.eval.suite_data, c.eval.every = "math", "/data", 5
    c.eval.suite_every = 7
    with pytest.raises(ValueError, match="eval.suite_every = 7 must be 0 or a multiple"):
        trainer_lib.build_parts(c, "/nonexistent/never")
