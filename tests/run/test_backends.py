"""The scalar backends: tensorboard opens no file until a scalar comes (a resume leaves no
empty event file), and Weights & Biases (offline) logs the names tensorboard logs."""

from __future__ import annotations

import io
import logging
import struct

import pytest

from rlvr_jax.run.backends import parse_backends
from rlvr_jax.run.logger import MetricsLogger


def _event_tags(logdir) -> set[str]:
    """The scalar tags of every tensorboard event file in `logdir` (TFRecord framing)."""
    from tensorboardX.proto import event_pb2

    tags = set()
    for path in logdir.glob("events.out.tfevents.*"):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            tags |= {v.tag for v in event.summary.value}
            pos += 12 + length + 4
    return tags


def _log_some(logger):
    logger.log(0, {"pass@8": 0.5, "mean_reward": 0.25}, split="eval")
    logger.log(1, {"reward": 0.3, "kl": 0.01, "note": "not a scalar"})


def test_a_resume_that_logs_nothing_leaves_no_event_file(tmp_path):
    logger = MetricsLogger(tmp_path, stream=io.StringIO())
    logger.truncate(-1)  # what a resume does first
    logger.close()
    assert not (tmp_path / "tensorboard").exists()
    logger = MetricsLogger(tmp_path, stream=io.StringIO())
    logger.truncate(-1)
    _log_some(logger)
    logger.close()
    files = list((tmp_path / "tensorboard").iterdir())
    assert len(files) == 1 and files[0].stat().st_size > 100
    # tensorboardX writes "@" as "_"; the JSONL keeps the name as logged.
    assert _event_tags(tmp_path / "tensorboard") == {
        "eval/pass_8", "eval/mean_reward", "train/reward", "train/kl"}  # fmt: skip


def test_parse_backends_names_the_unknown_one():
    assert parse_backends("tensorboard, wandb,tensorboard") == ("tensorboard", "wandb")
    assert parse_backends("") == ()
    with pytest.raises(ValueError, match="'tb'.*valid: tensorboard, wandb"):
        parse_backends("tensorboard,tb")


def test_progress_line_is_ended_before_a_log_record(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        logger = MetricsLogger(tmp_path, tensorboard=False, stream=out)
        logger.progress(1, 3, {"reward": 0.5})
        logging.getLogger("rlvr_jax.test").warning("eval at step 1: pass@1 0.5")
        logger.progress(2, 3, {"reward": 0.6})
        logger.close()
    finally:
        root.removeHandler(handler)
    lines = out.getvalue().split("\n")
    assert lines[0] == "\rstep 1/3 [33%] reward 0.50"  # ended by a newline, not overwritten
    assert lines[1] == "eval at step 1: pass@1 0.5"
    assert lines[2].startswith("\rstep 2/3 [67%] reward 0.60")
    assert handler.filters == []  # the logger removed its filter on close


def test_wandb_offline_logs_the_tensorboard_names(tmp_path, monkeypatch):
    import wandb  # in the test extra (for users: the optional extra, pip install -e '.[wandb]')
    logged = []
    original = wandb.Run.log

    def spy(self, data, *args, **kwargs):
        logged.append((kwargs.get("step"), dict(data)))
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(wandb.Run, "log", spy)
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = MetricsLogger(tmp_path, stream=io.StringIO(), backends=("tensorboard", "wandb"))
    _log_some(logger)
    logger.close()
    assert logged == [
        (0, {"eval/pass@8": 0.5, "eval/mean_reward": 0.25}),
        (1, {"train/reward": 0.3, "train/kl": 0.01}),
    ]
    names = {k.replace("@", "_") for _, d in logged for k in d}
    assert names == _event_tags(tmp_path / "tensorboard")
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0  # written offline, in the workdir


def test_wandb_is_not_imported_unless_chosen(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from rlvr_jax.run.logger import MetricsLogger; "
            f"l = MetricsLogger({str(tmp_path)!r}); l.log(0, {{'x': 1.0}}); l.close(); "
            "print('wandb' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
