"""The rollout worker in its own OS process (`async_rl.worker = "process"`, rl.async_process):
the same run as the thread worker, resume equal to the uninterrupted run, a child that
dies or fails raises in the learner, no child outlives the run, and the config errors."""

import os
import signal
import time

import pytest

from rlvr_jax.rl import async_process
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.async_loop import Versions, version_of
from rlvr_jax.rl.config import default_config, validate

from .test_async import _lines, _strip
from .test_config import load_experiment


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"worker": "fork"}, "config.async_rl.worker = 'fork'; valid: thread, process"),
        ({"worker": "process"}, "config.async_rl.worker = 'process' needs config.async_rl.max_"),
        ({"worker": "process", "max_staleness": 1, "partial_rollouts": "continue"},
         "config.async_rl.partial_rollouts = 'continue' is not supported with config.async_rl.w"),
        ({"worker": "process", "max_staleness": 1, "rollout_device": 1},
         "config.async_rl.rollout_device = 1 is for the thread worker"),
        ({"worker": "process", "max_staleness": 1, "worker_cpus": "0,x"},
         "config.async_rl.worker_cpus = '0,x'; must be"),
        ({"worker": "process", "max_staleness": 1, "worker_cpus": "1,1"},
         "config.async_rl.worker_cpus = '1,1'; must be"),
        ({"max_staleness": 1, "worker_cpus": "1"},
         "config.async_rl.worker_cpus = '1' needs config.async_rl.worker = 'process'"),
    ],
)  # fmt: skip
def test_bad_worker_config_names_the_field(changes, message):
    c = default_config()
    for key, value in changes.items():
        c.async_rl[key] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        validate(c)


def test_worker_cpus_are_checked_against_the_machine():
    assert async_process.parse_cpus("") == set()
    assert async_process.parse_cpus("0") == {0}
    n = os.cpu_count()
    with pytest.raises(ValueError, match=f"worker_cpus = '{n}': this machine has CPUs 0..{n - 1}"):
        async_process.parse_cpus(str(n))


def _process_pulse(k=1, steps=3, worker="process"):
    """The pulse config with a gradient and no rewards (the child's verifier cannot be
    monkeypatched: the entropy bonus makes every update move the weights)."""
    c = load_experiment("grpo", "pulse")
    c.train.steps = steps
    c.eval.at_start = False
    c.checkpoint.every = 2
    c.async_rl.max_staleness = k
    c.async_rl.worker = worker
    c.loss.recompute_old_logps = True
    c.loss.rollout_correction = "tis_token"
    c.loss.entropy_coef = 0.01
    return c


def _gone(pid: int, within: float = 5.0) -> bool:
    """Whether process `pid` has exited (and been reaped) within `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_killed_child_makes_the_learner_raise_and_is_pinned(tmp_path):
    """The child starts on `worker_cpus` (the learner's CPUs unchanged); killed, the
    learner's wait raises at once naming its exit code instead of hanging."""
    c = _process_pulse()
    cpu = os.cpu_count() - 1
    c.async_rl.worker_cpus = str(cpu)
    trainer = trainer_lib.Trainer.from_config(c, tmp_path)
    own = os.sched_getaffinity(0)
    worker = async_process.ProcessWorker(trainer, 1, 0, 0, 3, Versions())
    worker.start()
    try:
        pid = worker.process.pid
        assert os.sched_getaffinity(pid) == {cpu} and os.sched_getaffinity(0) == own
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=f"pid {pid}\\) exited with code -9 before produc"):
            worker.get(0)
        assert time.monotonic() - t0 < 10
    finally:
        worker.join(timeout=10)
    assert _gone(pid)


def test_an_error_in_the_child_is_raised_with_its_traceback(tmp_path):
    """The child builds from the config it is sent: a model it cannot build fails there,
    and the learner raises with the child's traceback; the child is gone after `join`."""
    trainer = trainer_lib.Trainer.from_config(_process_pulse(), tmp_path)
    bad = trainer.parts.config.copy_and_resolve_references()
    with bad.unlocked():
        bad.model.random_size = "no-such-preset"
    trainer.parts.config = bad  # what the worker sends the child
    worker = async_process.ProcessWorker(trainer, 1, 0, 0, 3, Versions())
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="failed:\nTraceback") as err:
            worker.get(0)
        assert "no-such-preset" in str(err.value) and "build_rollout_parts" in str(err.value)
    finally:
        worker.join(timeout=10)
    assert _gone(worker.process.pid)


@pytest.fixture
def started(monkeypatch):
    """The ProcessWorkers a test's runs start (to check their children are gone)."""
    out = []
    start = async_process.ProcessWorker.start

    def record(self):
        out.append(self)
        start(self)

    monkeypatch.setattr(async_process.ProcessWorker, "start", record)
    return out


def _push_free(rows):
    return [{k: v for k, v in x.items() if k != "async/weight_push_seconds"} for x in rows]


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_the_process_worker_gives_the_thread_workers_run(k, tmp_path, started):
    """Same schedule, keys and programs: bitwise the same metrics (losses, ratios,
    staleness, versions) and final weights; the push is timed; no child is left."""
    trainer_lib.train(_process_pulse(k, worker="thread"), tmp_path / "thread")
    trainer_lib.train(_process_pulse(k), tmp_path / "process")
    a, b = _lines(tmp_path / "thread"), _lines(tmp_path / "process")
    assert [x["async/policy_version"] for x in b] == [version_of(t, k, 0) for t in range(3)]
    assert all(x["async/weight_push_seconds"] > 0 and x["grad_norm"] > 0 for x in b)
    assert _push_free(_strip(b)) == _push_free(_strip(a))
    export = [
        (tmp_path / d / "export" / "model.safetensors").read_bytes() for d in ("thread", "process")
    ]
    assert export[0] == export[1]
    assert len(started) == 1 and _gone(started[0].process.pid)


@pytest.mark.slow
def test_sigterm_and_crash_resume_equal_the_uninterrupted_process_run(
    tmp_path, monkeypatch, started
):
    """The child's scheduler state and prompt position after the in-flight steps are what
    the checkpoint holds: a resumed run trains every group once, as the straight run."""
    straight = tmp_path / "straight"
    trainer_lib.train(_process_pulse(steps=4), straight)
    original = trainer_lib.Trainer.update

    def preempt(self, batch, step):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, batch, step)

    sigterm = tmp_path / "sigterm"
    monkeypatch.setattr(trainer_lib.Trainer, "update", preempt)
    result = trainer_lib.train(_process_pulse(steps=4), sigterm)
    assert result == {"preempted": True, "step": 2}
    assert (sigterm / "async_inflight" / "2.pkl").is_file()

    def crash(self, batch, step):
        if step == 3:
            raise KeyboardInterrupt("killed")
        return original(self, batch, step)

    crashed = tmp_path / "crashed"
    monkeypatch.setattr(trainer_lib.Trainer, "update", crash)
    with pytest.raises(KeyboardInterrupt):
        trainer_lib.train(_process_pulse(steps=4), crashed)
    monkeypatch.setattr(trainer_lib.Trainer, "update", original)
    assert all(_gone(w.process.pid) for w in started)  # preempted and crashed: stopped
    for d in (sigterm, crashed):
        trainer_lib.train(_process_pulse(steps=4), d)
        assert [x["step"] for x in _lines(d)] == [1, 2, 3, 4]  # none twice, none lost
        assert _push_free(_strip(_lines(d))) == _push_free(_strip(_lines(straight)))
        export = "export/model.safetensors"
        assert (d / export).read_bytes() == (straight / export).read_bytes()
    assert len(started) == 5 and all(_gone(w.process.pid) for w in started)


@pytest.mark.slow
def test_a_child_killed_mid_run_stops_the_run(tmp_path, monkeypatch, started):
    """Killed after step 0, the learner raises when it next needs the child (no hang)."""
    get = async_process.ProcessWorker.get

    def kill_then_get(self, step):
        if step == 1:
            os.kill(self.process.pid, signal.SIGKILL)
        return get(self, step)

    monkeypatch.setattr(async_process.ProcessWorker, "get", kill_then_get)
    with pytest.raises(RuntimeError, match="exited with code -9 before producing step"):
        trainer_lib.train(_process_pulse(k=1, steps=4), tmp_path)
    assert _gone(started[0].process.pid)
