"""RunIO's run safety on a tiny state (no model): the workdir lock, the log rewound to the
restored checkpoint, the fallback past a corrupted checkpoint, config changes on resume,
the divergence guard and the empty workdir. Each test reproduces a fault of a real run."""

import dataclasses
import glob
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.locking import FileLock, HeldError
from rlvr_jax.rl.config import default_config
from rlvr_jax.run.guard import Diverged, DivergenceGuard
from rlvr_jax.run.run_io import RunIO

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class State:
    """Shaped like the trainer's state where RunIO looks: params and critic params."""

    params: Any
    critic_params: Any = None


def _state(value: float) -> dict:
    return {"w": jnp.full((4,), value, jnp.float32), "step": jnp.int32(7)}


class Prompts:
    """A prompt iterator's checkpoint interface."""

    def __init__(self, position: int = 0):
        self.position = position

    def get_state(self):
        return {"position": self.position}

    def set_state(self, state):
        self.position = state["position"]


def _config():
    c = default_config()
    c.log.tensorboard = False
    return c


def _crash(io: RunIO) -> None:
    """What a killed process leaves: open files dropped, the flock freed by the kernel."""
    io._lock._fd, fd = None, io._lock._fd
    os.close(fd)
    io._lock = None


def _records(workdir):
    return [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- workdir lock
def test_second_run_on_a_workdir_is_refused_naming_the_holder(tmp_path):
    first = RunIO(tmp_path, _config())
    with pytest.raises(HeldError, match=rf"in use by pid {os.getpid()} on host .*, started 20"):
        RunIO(tmp_path, _config())
    first.close()
    RunIO(tmp_path, _config()).close()  # free again once the first run closed


def _holder_process(path: Path) -> subprocess.Popen:
    code = (
        "import sys, time; from rlvr_jax.locking import FileLock; "
        f"FileLock({str(path)!r}).acquire(); print('held', flush=True); time.sleep(600)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"held"
    return proc


def test_lock_of_a_live_process_refuses_and_of_a_dead_one_is_taken_over(tmp_path, caplog):
    proc = _holder_process(tmp_path / "run.lock")
    try:
        with pytest.raises(HeldError, match=rf"pid {proc.pid} on host"):
            RunIO(tmp_path, _config())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with caplog.at_level(logging.WARNING, logger="rlvr_jax.locking"):
        io = RunIO(tmp_path, _config())
    assert f"taking over run directory {tmp_path} from pid {proc.pid}" in caplog.text
    holder = json.loads((tmp_path / "run.lock").read_text())
    assert holder["pid"] == os.getpid()
    io.close()
    assert not (tmp_path / "run.lock").exists()  # released: the file is removed


def test_url_lock_refuses_another_hosts_holder_and_takes_over_a_dead_local_one(
    tmp_path, monkeypatch
):
    # Object stores have no flock: the holder line is the lock. Simulated on a local path.
    lock = FileLock(tmp_path / "l")
    monkeypatch.setattr(lock, "_local", False)
    other = {"host": "elsewhere", "pid": 1, "start": "2026-01-01T00:00:00+00:00"}
    (tmp_path / "l").write_text(json.dumps(other))
    with pytest.raises(HeldError, match="host elsewhere.*delete the lock file"):
        lock.acquire()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout  # fmt: skip
    import socket

    stale = {"host": socket.gethostname(), "pid": int(dead), "start": "x"}
    (tmp_path / "l").write_text(json.dumps(stale))
    lock.acquire()
    assert json.loads((tmp_path / "l").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / "l").exists()


# ---------------------------------------------------------------- the log after a crash
def test_crash_before_the_first_checkpoint_leaves_no_duplicate_rows(tmp_path):
    io = RunIO(tmp_path, _config())
    state, start = io.restore(_state(0), Prompts())
    assert start == 0
    io.log_eval(0, {"pass@1": 0.5})
    for step in range(1, 6):
        io.log_train(step, 20, {"loss": 0.1 * step})
    _crash(io)

    io = RunIO(tmp_path, _config())
    state, start = io.restore(_state(0), Prompts())
    assert start == 0 and _records(tmp_path) == []  # the rerun logs eval 0 and 1.. again
    io.close()


def test_resume_rewinds_the_log_to_the_checkpoint_including_the_final_eval(tmp_path):
    io = RunIO(tmp_path, _config())
    io.restore(_state(0), Prompts())
    io.log_eval(0, {"pass@1": 0.5})
    for step in (1, 2):
        io.log_train(step, 2, {"loss": 0.1 * step})
    io.save(2, _state(2), Prompts(2), {"loss": 0.2})
    kept = _records(tmp_path)
    io.log_eval(2, {"pass@1": 0.75})  # the final evaluation, logged after the last save
    _crash(io)  # e.g. the export crashed

    io = RunIO(tmp_path, _config())
    prompts = Prompts()
    state, start = io.restore(_state(0), prompts)
    assert start == 2 and prompts.position == 2
    assert _records(tmp_path) == kept  # the final eval is logged again by the rerun
    io.log_eval(2, {"pass@1": 0.75})
    assert [r["split"] for r in _records(tmp_path)] == ["eval", "train", "train", "eval"]
    io.close()


# ---------------------------------------------------------------- corrupted checkpoint
def test_corrupted_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    io = RunIO(tmp_path, _config())
    io.restore(_state(0), Prompts())
    for step in (1, 2):
        io.log_train(step, 4, {"loss": float(step)})
        io.save(step, _state(step), Prompts(step), {"loss": float(step)})
    io.close()
    for path in glob.glob(str(tmp_path / "checkpoints" / "2" / "state" / "**" / "d" / "*"),
                          recursive=True):  # fmt: skip
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])

    io = RunIO(tmp_path, _config())
    prompts = Prompts()
    with caplog.at_level(logging.WARNING, logger="rlvr_jax.run.run_io"):
        state, start = io.restore(_state(0), prompts)
    assert start == 1 and prompts.position == 1
    np.testing.assert_array_equal(state["w"], np.ones(4))
    assert "checkpoint 2 in" in caplog.text and "does not restore" in caplog.text
    assert (tmp_path / "corrupt_checkpoints" / "2").is_dir()
    assert [r["step"] for r in _records(tmp_path)] == [1]
    io.log_train(2, 4, {"loss": 2.0})
    io.save(2, _state(2), Prompts(2), {"loss": 2.0})  # step 2 is written again
    assert io.ckpt.all_steps() == [1, 2]
    io.close()


# ---------------------------------------------------------------- config changes on resume
def test_resume_with_a_changed_field_needs_the_flag(tmp_path, caplog):
    io = RunIO(tmp_path, _config())
    io.save(1, _state(1), Prompts(1), {})
    io.close()
    changed = _config()
    changed.optimizer.lr = 1e-5
    with pytest.raises(ValueError, match="--allow_config_change=optimizer.lr"):
        RunIO(tmp_path, changed)
    with pytest.raises(ValueError, match="'optimizer.lrr', which is no config field"):
        RunIO(tmp_path, changed, allow_config_change=["optimizer.lrr"])
    with caplog.at_level(logging.WARNING, logger="rlvr_jax.run.run_io"):
        RunIO(tmp_path, changed, allow_config_change=["optimizer.lr"]).close()
    assert "config changes: optimizer.lr" in caplog.text
    assert json.loads((tmp_path / "config.json").read_text())["optimizer"]["lr"] == 1e-5
    changed.optimizer.b2 = 0.9  # a whole section may be named
    RunIO(tmp_path, changed, allow_config_change=["optimizer"]).close()


def test_a_field_added_since_the_run_began_counts_as_its_default(tmp_path):
    """A workdir saved before `async_rl` existed resumes when this run keeps its defaults,
    and is refused when this run sets it (the old run never ran that way)."""
    defaults = json.loads(default_config().to_json())
    io = RunIO(tmp_path, _config())
    io.save(1, _state(1), Prompts(1), {})
    io.close()
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["async_rl"]  # as written by a version without the section
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="async_rl.max_staleness"):
        RunIO(tmp_path, _config())  # without the defaults, every new field is a change
    RunIO(tmp_path, _config(), defaults=defaults).close()
    (tmp_path / "config.json").write_text(json.dumps(saved))
    changed = _config()
    changed.async_rl.max_staleness = 1
    with pytest.raises(ValueError, match="async_rl.max_staleness: None -> 1|0 -> 1"):
        RunIO(tmp_path, changed, defaults=defaults)


def test_without_a_checkpoint_any_config_starts_over(tmp_path):
    RunIO(tmp_path, _config()).close()
    changed = _config()
    changed.credit.name = "rloo"
    RunIO(tmp_path, changed).close()
    assert json.loads((tmp_path / "config.json").read_text())["credit"]["name"] == "rloo"


# ---------------------------------------------------------------- divergence guard
@pytest.mark.parametrize(
    "w, grad_norm, message",
    [
        (np.nan, 1.0, "a parameter is not finite"),
        (1e29, 1.0, "max |parameter| = 1e+29 exceeds config.guard.max_param_abs = 10000"),
        (1.0, np.inf, "grad_norm = inf"),
        (1.0, 5e6, "grad_norm = 5e+06 exceeds config.guard.max_grad_norm = 1e+06"),
    ],
)
def test_guard_stops_on_non_finite_or_exploded_state(tmp_path, w, grad_norm, message):
    io = RunIO(tmp_path, _config())
    io.save(3, _state(3), Prompts(3), {})
    state = State(params=_state(w))
    with pytest.raises(Diverged, match=rf"step 4 \(update 1.*{re.escape(message)}"):
        io.check_update(state, {"grad_norm": grad_norm}, step=4, update=1)
    with pytest.raises(
        Diverged, match=r"last good checkpoint \(step 3\) is intact.*allow_config_change"
    ):
        io.check_update(state, {"grad_norm": grad_norm}, step=4, update=1)
    io.check_update(State(params=_state(1.0)), {"grad_norm": 3.0}, step=4)  # sane: no error
    io.close()


def test_guard_bounds_can_be_off_but_non_finite_always_stops():
    guard = DivergenceGuard(max_grad_norm=0, max_param_abs=0)
    guard.check(_state(1e29), {"grad_norm": 1e30}, step=1, update=0, last_good=None)
    with pytest.raises(Diverged, match="No checkpoint was saved yet"):
        guard.check(_state(np.inf), {}, step=1, update=0, last_good=None)
    with pytest.raises(Diverged, match="critic_grad_norm = nan"):
        guard.check(_state(1), {"critic_grad_norm": np.nan}, step=1, update=0, last_good=None)


# ---------------------------------------------------------------- workdir and exit status
def test_empty_workdir_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="workdir is empty"):
        RunIO("", _config())
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_an_empty_workdir(tmp_path):
    cmd = [sys.executable, "-m", "rlvr_jax.main",
           f"--config={ROOT}/experiments/baselines/grpo.py:pulse", "--workdir="]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0 and "--workdir is empty" in out.stderr
    assert list(tmp_path.iterdir()) == [] and time.monotonic() - start < 120


def test_preempted_run_exits_with_its_own_status(monkeypatch):
    from rlvr_jax import main as main_lib
    from rlvr_jax.rl import trainer
    from rlvr_jax.run.run_io import EXIT_PREEMPTED

    calls = []

    def fake_train(config, workdir, allow_config_change=()):
        calls.append((workdir, list(allow_config_change)))
        return {"preempted": True, "step": 3}

    monkeypatch.setattr(trainer, "train", fake_train)
    argv = ["main", f"--config={ROOT}/experiments/baselines/grpo.py:pulse", "--workdir=/x",
            "--allow_config_change=optimizer.lr,optimizer.b2"]  # fmt: skip
    main_lib.flags.FLAGS.unparse_flags()
    main_lib.flags.FLAGS(argv)
    with pytest.raises(SystemExit) as exit_info:
        main_lib.main([])
    main_lib.flags.FLAGS.unparse_flags()
    assert exit_info.value.code == EXIT_PREEMPTED == 75
    assert calls == [("/x", ["optimizer.lr", "optimizer.b2"])]


def test_when_no_checkpoint_restores_nothing_is_moved(tmp_path):
    io = RunIO(tmp_path, _config())
    io.save(1, _state(1), Prompts(1), {})
    io.close()
    for path in glob.glob(str(tmp_path / "checkpoints" / "1" / "state" / "**" / "d" / "*"),
                          recursive=True):  # fmt: skip
        Path(path).write_bytes(b"")
    io = RunIO(tmp_path, _config())
    with pytest.raises(RuntimeError, match=r"none of the checkpoints \[1\] .* restores"):
        io.restore(_state(0), Prompts())
    assert io.ckpt.all_steps() == [1] and not (tmp_path / "corrupt_checkpoints").exists()
    io.close()
