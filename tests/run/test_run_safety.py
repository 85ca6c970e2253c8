"""Run safety end to end on the GRPO pulse (a tiny random model, real trainer; slow).

Each test reproduces a fault of a real run: a blow-up in a step's last update saved as
the "last good" checkpoint, duplicate metric rows after a crash and rerun, two live runs
on one workdir, and a preempted run that exited 0.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import rlvr_jax.models
from rlvr_jax.rl import steps as steps_lib
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.run.run_io import EXIT_PREEMPTED

from ..rl.test_config import load_experiment

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TIMING = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s")


def _pulse(steps=3):
    c = load_experiment("grpo", "pulse")
    c.train.steps = steps
    c.log.tensorboard = False
    return c


def _log(workdir):
    lines = (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING} for x in lines]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted 3-step run with one checkpoint, at the end."""
    workdir = tmp_path_factory.mktemp("straight")
    c = _pulse()
    c.checkpoint.every = 10
    trainer_lib.train(c, workdir)
    return workdir


def test_crash_before_any_checkpoint_then_rerun_logs_like_an_uninterrupted_run(
    tmp_path, monkeypatch, straight
):
    original = trainer_lib.Trainer.update

    def crash_in_step_2(self, batch, step):
        if step == 1:
            raise RuntimeError("injected crash")
        return original(self, batch, step)

    c = _pulse()
    c.checkpoint.every = 10
    monkeypatch.setattr(trainer_lib.Trainer, "update", crash_in_step_2)
    with pytest.raises(RuntimeError, match="injected crash"):
        trainer_lib.train(c, tmp_path)
    assert [r["step"] for r in _log(tmp_path)] == [0, 1]  # eval 0, train 1; no checkpoint
    monkeypatch.setattr(trainer_lib.Trainer, "update", original)
    trainer_lib.train(c, tmp_path)
    assert _log(tmp_path) == _log(straight)


def test_crash_in_the_final_export_then_rerun_logs_like_an_uninterrupted_run(
    tmp_path, monkeypatch, straight
):
    original = rlvr_jax.models.save_pretrained

    def failing_export(*args, **kwargs):
        raise OSError("injected: disk full")

    c = _pulse()
    c.checkpoint.every = 10
    monkeypatch.setattr(rlvr_jax.models, "save_pretrained", failing_export)
    with pytest.raises(OSError, match="disk full"):
        trainer_lib.train(c, tmp_path)
    monkeypatch.setattr(rlvr_jax.models, "save_pretrained", original)
    trainer_lib.train(c, tmp_path)
    assert _log(tmp_path) == _log(straight)  # the final eval row once, not twice


def test_blow_up_in_a_steps_last_update_is_never_checkpointed(tmp_path, monkeypatch):
    """Step 2's last update multiplies the parameters by 1e30 (its loss, computed before
    the update, is finite). The run must stop without saving step 2, and a rerun with a
    changed learning rate must resume from step 1."""
    original = steps_lib.make_update
    calls = []

    def make_update(*args, **kwargs):
        update = original(*args, **kwargs)

        def blowing_up(state, *rest):
            state, metrics = update(state, *rest)
            calls.append(1)
            if len(calls) == 4:  # pulse: 2 updates per step; the 4th is step 2's last
                state = state.replace(params=jax.tree.map(lambda p: p * 1e30, state.params))
            return state, metrics

        return blowing_up

    monkeypatch.setattr(steps_lib, "make_update", make_update)
    with pytest.raises(FloatingPointError, match=r"diverged at step 2 \(update 1.*step 1"):
        trainer_lib.train(_pulse(), tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1"]

    monkeypatch.setattr(steps_lib, "make_update", original)
    changed = _pulse()
    changed.optimizer.lr = 1e-5
    with pytest.raises(ValueError, match="--allow_config_change=optimizer.lr"):
        trainer_lib.train(changed, tmp_path)
    result = trainer_lib.train(changed, tmp_path, allow_config_change=["optimizer.lr"])
    assert np.isfinite(result["pass@1"])
    assert [r["step"] for r in _log(tmp_path) if r["split"] == "train"] == [1, 2, 3]
    assert json.loads((tmp_path / "config.json").read_text())["optimizer"]["lr"] == 1e-5


def _cli(workdir, *flags):
    cmd = [sys.executable, "-m", "rlvr_jax.main",
           "--config=experiments/baselines/grpo.py:pulse", f"--workdir={workdir}",
           "--config.log.progress_every_s=0", "--config.log.tensorboard=false", *flags]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


def test_second_cli_run_is_refused_and_sigterm_exits_75(tmp_path):
    first = _cli(tmp_path, "--config.train.steps=500", "--config.checkpoint.every=1000")
    try:
        for line in first.stderr:  # wait until the run is training
            if "step 1/500" in line:
                break
        else:
            pytest.fail(f"the first run ended early: {first.wait()}")
        second = _cli(tmp_path)
        _, err = second.communicate(timeout=600)
        assert second.returncode != 0
        assert f"is in use by pid {first.pid} on host" in err
        first.send_signal(signal.SIGTERM)
        _, rest = first.communicate(timeout=600)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == EXIT_PREEMPTED, rest[-2000:]
    assert "SIGTERM received: checkpoint saved" in rest
    steps = [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()]
    assert len(steps) == 1
    assert not (tmp_path / "run.lock").exists()  # released on the way out
