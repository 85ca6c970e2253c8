"""Asynchronous RL (`async_rl.max_staleness`, rl.async_loop): the fixed version schedule,
the behaviour ratio it creates and its corrections, resume after SIGTERM or a crash
equal to the uninterrupted run, and the config errors."""

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
from rlvr_jax.rl.async_loop import rollout_device, version_of
from rlvr_jax.rl.build import build_mesh
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rollout import score
from rlvr_jax.testing import parity_score_rows

from .test_config import BASELINES, load_experiment

ROOT = Path(__file__).resolve().parents[2]
TIMING = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s",
          "async/learner_wait_seconds", "async/rollout_wait_seconds")  # fmt: skip


def test_version_schedule():
    assert [version_of(t, 1, 0) for t in range(5)] == [0, 0, 1, 2, 3]
    assert [version_of(t, 2, 0) for t in range(5)] == [0, 0, 0, 1, 2]
    assert [version_of(t, 2, 3) for t in range(3, 7)] == [3, 3, 3, 4]  # resumed at 3


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"async_rl.max_staleness": -1}, "config.async_rl.max_staleness = -1"),
        ({"loss.rollout_correction": "tis"}, "loss.rollout_correction"),
        ({"loss.rollout_correction": "tis_token", "loss.recompute_old_logps": True,
          "loss.rollout_correction_cap": 1.0}, "config.loss.rollout_correction_cap = 1.0"),
        ({"loss.rollout_correction": "mis_token"}, "recompute_old_logps = True"),
        ({"loss.rollout_correction": "tis_token", "loss.recompute_old_logps": True,
          "loss.tis_cap": 2.0}, "loss.tis_cap"),
        ({"async_rl.max_staleness": 1, "rollout.name": "guided"}, "config.rollout.name = 'guided'"),
        ({"async_rl.max_staleness": 2, "select.name": "leeps"}, "config.select.name = 'leeps'"),
    ],
)  # fmt: skip
def test_bad_async_config_names_the_field(changes, message):
    c = default_config()
    for field, value in changes.items():
        section, key = field.split(".")
        c[section][key] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        validate(c)


def _lines(workdir, split="train"):
    rows = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in rows if x["split"] == split]


def _async_pulse(k=1, steps=4, **loss):
    c = load_experiment("grpo", "pulse")
    c.train.steps = steps
    c.eval.at_start = False
    c.checkpoint.every = 2
    c.async_rl.max_staleness = k
    c.loss.recompute_old_logps = True
    for key, value in loss.items():
        c.loss[key] = value
    return c


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_rows_carry_the_scheduled_version_and_the_ratio_moves(k, tmp_path, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)  # groups differ: updates run
    trainer_lib.train(_async_pulse(k, steps=4, rollout_correction="mis_token"), tmp_path)
    train = _lines(tmp_path)
    assert [x["async/policy_version"] for x in train] == [version_of(t, k, 0) for t in range(4)]
    for t, x in enumerate(train):
        s = t - version_of(t, k, 0)
        assert x["async/staleness"] == s and x[f"async/rows_at_staleness_{s}"] == 16
        if s == 0:  # sampled by the learner's own policy: π_old = μ up to kernel noise
            assert abs(x["is/ratio_max"] - 1) < 1e-3 and x["is/masked_frac"] == 0
    # Rows sampled by a policy the learner has since updated: ρ = π_old / μ is not 1.
    stale = [x for t, x in enumerate(train) if t - version_of(t, k, 0) > 0 and t > 1]
    assert stale and all(max(x["is/ratio_max"] - 1, 1 - x["is/ratio_min"]) > 1e-3 for x in stale)
    assert all(x["grad_norm"] > 0 for x in train)


def _strip(rows):
    return [{k: v for k, v in x.items() if k not in TIMING} for x in rows]


@pytest.mark.slow
def test_sigterm_and_crash_resume_equal_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    straight = tmp_path / "straight"
    trainer_lib.train(_async_pulse(1, rollout_correction="tis_token"), straight)
    original = trainer_lib.Trainer.update

    # SIGTERM during step 1: the step finishes, checkpoint 2 (with step 2's in-flight
    # groups) is saved and the run stops; the rerun resumes.
    def preempt(self, batch, step):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, batch, step)

    sigterm = tmp_path / "sigterm"
    monkeypatch.setattr(trainer_lib.Trainer, "update", preempt)
    assert trainer_lib.train(_async_pulse(1, rollout_correction="tis_token"), sigterm) == {
        "preempted": True,
        "step": 2,
    }
    assert (sigterm / "async_inflight" / "2.pkl").is_file()

    # A crash in step 3's update (as kill -9 there): nothing after checkpoint 2 is kept.
    def crash(self, batch, step):
        if step == 3:
            raise KeyboardInterrupt("killed")
        return original(self, batch, step)

    crashed = tmp_path / "crashed"
    monkeypatch.setattr(trainer_lib.Trainer, "update", crash)
    with pytest.raises(KeyboardInterrupt):
        trainer_lib.train(_async_pulse(1, rollout_correction="tis_token"), crashed)
    monkeypatch.setattr(trainer_lib.Trainer, "update", original)
    for d in (sigterm, crashed):
        trainer_lib.train(_async_pulse(1, rollout_correction="tis_token"), d)
        a = (straight / "export" / "model.safetensors").read_bytes()
        assert (d / "export" / "model.safetensors").read_bytes() == a
        # No step logged twice, none lost, the same groups (rewards, lengths, ratios).
        assert [x["step"] for x in _lines(d)] == [1, 2, 3, 4]
        assert _strip(_lines(d)) == _strip(_lines(straight))


@pytest.mark.slow
def test_first_step_equals_the_synchronous_run(tmp_path, monkeypatch):
    """Step 0 is sampled by version 0 in both schedules: its groups and update agree."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    sync = _async_pulse(0, steps=1)
    trainer_lib.train(sync, tmp_path / "sync")
    trainer_lib.train(_async_pulse(1, steps=1), tmp_path / "async")
    a, b = _lines(tmp_path / "sync")[0], _lines(tmp_path / "async")[0]
    for key in ("loss", "grad_norm", "pass_rate", "response_len", "mean_reward"):
        if key in a:
            assert np.isclose(a[key], b[key], rtol=1e-6), key
    sa = (tmp_path / "sync" / "export" / "model.safetensors").read_bytes()
    assert (tmp_path / "async" / "export" / "model.safetensors").read_bytes() == sa


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["continue", "abort"])
def test_partial_rollouts_through_the_trainer(mode, tmp_path, monkeypatch):
    """Free-running: which version each segment gets depends on timing; what must hold is
    the bound (no token older than k versions) and the bookkeeping (every token counted)."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    c = _async_pulse(1, steps=3, rollout_correction="tis_token")
    c.async_rl.partial_rollouts = mode
    c.async_rl.segment_tokens = 4
    trainer_lib.train(c, tmp_path)
    train = _lines(tmp_path)
    assert [x["step"] for x in train] == [1, 2, 3]
    for x in train:
        counted = x["async/tokens_staleness_0"] + x["async/tokens_staleness_1"]
        assert counted == pytest.approx(x["response_len"] * 16)  # 16 rows, mean length
        assert not any(k.startswith("async/tokens_staleness_2") for k in x)
        if mode == "continue":
            assert x["async/aborted_tokens"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_trains_one_step_off(name, tmp_path, monkeypatch):
    """Each baseline (critic, DAPO's dynamic sampling in the worker, RLOO, GSPO, ...) runs
    with k = 1: step 2 trains on stale rows and its loss and gradient are finite."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    c = load_experiment(name, "pulse")
    c.eval.at_start = False
    c.async_rl.max_staleness = 1
    c.loss.recompute_old_logps = True
    c.loss.rollout_correction = "tis_token"
    trainer_lib.train(c, tmp_path)
    train = _lines(tmp_path)
    assert [x["async/staleness"] for x in train] == [0.0, 1.0]
    last = train[-1]
    assert np.isfinite(last["loss"]) and last["grad_norm"] > 0
    assert "is/ratio_mean" in last and np.isfinite(last["is/ratio_mean"])


@pytest.mark.slow
@pytest.mark.parametrize("slug", ["sara", "vigor", "pair", "difficulty"])
def test_pool_schedulers_run_in_the_worker(slug, tmp_path, monkeypatch):
    """The select stage runs in the rollout worker: SARA's, VIGOR's, PAIR's rounds and the
    difficulty pool's statistics come from rows of the policy one step behind."""
    from tests.rl.test_scheduled import _experiment

    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    c = _experiment(slug)
    c.eval.at_start = False
    c.async_rl.max_staleness = 1
    c.loss.recompute_old_logps = True
    trainer_lib.train(c, tmp_path)
    train = _lines(tmp_path)
    assert [x["async/staleness"] for x in train] == [0.0, 1.0]
    assert all(x["select/rollouts"] > 0 for x in train)
    assert np.isfinite(train[-1]["loss"])


def _cli(workdir, steps):
    cmd = [
        sys.executable,
        "-m",
        "rlvr_jax.main",
        "--config=experiments/baselines/grpo.py:pulse",
        f"--workdir={workdir}",
        f"--config.train.steps={steps}",
        "--config.checkpoint.every=2",
        "--config.eval.at_start=false",
        "--config.log.progress_every_s=0",
        "--config.async_rl.max_staleness=1",
        "--config.loss.recompute_old_logps=true",
        "--config.loss.rollout_correction=tis_token",
        "--config.loss.entropy_coef=0.01",
    ]  # fmt: skip  (a gradient without rewards)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_equals_the_uninterrupted_run(tmp_path):
    straight = _cli(tmp_path / "straight", 6)
    _, err = straight.communicate(timeout=900)
    assert straight.returncode == 0, err[-2000:]
    killed = _cli(tmp_path / "killed", 6)
    try:
        for line in killed.stderr:  # SIGKILL during step 4: checkpoint 2 is the last one
            if "step 3/6" in line:
                killed.send_signal(signal.SIGKILL)
                break
        killed.wait(timeout=300)
    finally:
        killed.kill()
    assert killed.returncode == -signal.SIGKILL
    rerun = _cli(tmp_path / "killed", 6)
    _, err = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, err[-2000:]
    a, b = tmp_path / "straight", tmp_path / "killed"
    assert [x["step"] for x in _lines(b)] == [1, 2, 3, 4, 5, 6]  # none twice, none lost
    assert _strip(_lines(b)) == _strip(_lines(a))
    assert max(x["is/ratio_max"] for x in _lines(a)) > 1 + 1e-4  # the weights moved
    assert (b / "export" / "model.safetensors").read_bytes() == (
        a / "export" / "model.safetensors"
    ).read_bytes()


def test_rollout_device_is_outside_the_learners_mesh():
    mesh = build_mesh(default_config())  # one device: the first
    assert rollout_device(-1, mesh) is None
    assert rollout_device(1, mesh) == jax.local_devices()[1]  # the suite has 8 CPU devices
    with pytest.raises(ValueError, match="is a device of the learner's mesh"):
        rollout_device(0, mesh)
    with pytest.raises(ValueError, match="config.async_rl.rollout_device = 99, but this process"):
        rollout_device(99, mesh)


@pytest.mark.slow
def test_worker_on_its_own_device_gives_the_colocated_run(tmp_path, monkeypatch):
    """Disaggregated in one process (rollout_device = 1): the same fixed schedule, so the
    same groups and updates as the colocated worker, with the weight push logged."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    trainer_lib.train(_async_pulse(1, steps=3, rollout_correction="tis_token"), tmp_path / "a")
    c = _async_pulse(1, steps=3, rollout_correction="tis_token")
    c.async_rl.rollout_device = 1
    trainer_lib.train(c, tmp_path / "b")
    a, b = _lines(tmp_path / "a"), _lines(tmp_path / "b")
    assert all(x["async/weight_push_seconds"] > 0 for x in b)
    drop = ("async/weight_push_seconds",)
    assert [{k: v for k, v in x.items() if k not in drop} for x in _strip(b)] == [
        {k: v for k, v in x.items() if k not in drop} for x in _strip(a)
    ]
