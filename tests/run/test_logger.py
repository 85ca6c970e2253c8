"""MetricsLogger: the JSONL, tensorboard events, the progress line, truncation on resume."""

from __future__ import annotations

import io
import json
import math
import re
import struct

import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.run.logger import MetricsLogger, format_duration
from rlvr_jax.run.metrics_file import read_metrics


def _read_events(logdir):
    """Every Event in the tensorboard files under `logdir`, file by file (TFRecord framing)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for f in sorted(logdir.glob("events.out.tfevents.*")):
        data = f.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            pos += 12  # length + its masked crc32
            events.append(Event.FromString(data[pos : pos + length]))
            pos += length + 4  # payload + its masked crc32
    return events


def _scalars(events):
    return [(e.step, v.tag, v.simple_value) for e in events for v in e.summary.value]


def _lines(path):
    return path.read_text().splitlines()


def test_log_writes_and_flushes_one_json_line_per_call(tmp_path):
    logger = MetricsLogger(tmp_path / "run", stream=io.StringIO())
    logger.log(3, {"reward": np.float32(0.25), "n": 7, "kl": jnp.float32(0.5), "note": "hi"})
    logger.log(4, {"loss": float("nan"), "grad": float("inf")}, split="eval")
    # Read before close: every line must already be on disk.
    lines = _lines(tmp_path / "run" / "metrics.jsonl")
    assert len(lines) == 2
    first, second = (json.loads(x) for x in lines)
    assert first.pop("time") == pytest.approx(__import__("time").time(), abs=60)
    assert first == {"step": 3, "split": "train", "reward": 0.25, "n": 7, "kl": 0.5, "note": "hi"}
    assert isinstance(first["n"], int)
    assert second["split"] == "eval" and second["step"] == 4
    assert math.isnan(second["loss"]) and second["grad"] == math.inf
    logger.close()


def test_log_rejects_reserved_names_and_non_scalars(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    with pytest.raises(ValueError, match="reserved.*step"):
        logger.log(0, {"step": 1.0})
    with pytest.raises(TypeError, match="'vec'"):
        logger.log(0, {"vec": np.zeros(3)})
    logger.close()
    assert _lines(tmp_path / "metrics.jsonl") == []


def test_tensorboard_event_file_holds_the_scalars(tmp_path):
    logger = MetricsLogger(tmp_path, stream=io.StringIO())
    logger.log(1, {"reward": 0.5, "note": "skipped by tensorboard"})
    logger.log(2, {"reward": 0.75, "kl": float("nan")})
    logger.log(2, {"pass@8": 0.375}, split="eval")
    logger.close()
    files = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    scalars = _scalars(_read_events(tmp_path / "tensorboard"))
    assert [s for s in scalars if not math.isnan(s[2])] == [
        (1, "train/reward", 0.5),
        (2, "train/reward", 0.75),
        (2, "eval/pass_8", 0.375),  # tensorboardX turns "@" into "_"
    ]
    assert [(s, t) for s, t, v in scalars if math.isnan(v)] == [(2, "train/kl")]


def test_progress_line_format_on_a_plain_stream(tmp_path):
    out = io.StringIO()
    logger = MetricsLogger(tmp_path, tensorboard=False, stream=out, progress_every_s=3600)
    metrics = {
        "reward": 0.4123, "pass_rate": 0.375, "kl": 0.0021234, "entropy": 0.9,
        "response_len": 31.4, "tokens_per_s": 5400.4, "step_seconds": 2.5,
        "loss": 1.0,  # not in the preferred list: not shown
    }  # fmt: skip
    logger.progress(12, 60, metrics)
    # The first line's ETA comes from step_seconds: 48 steps left x 2.5 s = 120 s.
    want = (
        "step 12/60 [20%] reward 0.41 pass 0.38 kl 0.00212 ent 0.9 len 31 tok/s 5400 "
        "2.5 s/step eta 2m00s"
    )
    assert out.getvalue() == want + "\n"
    logger.progress(13, 60, metrics)  # within progress_every_s: not printed
    logger.progress(14, 60, {"reward": 0.5})
    assert out.getvalue() == want + "\n"
    logger.progress(60, 60, {"reward": 0.5, "step_seconds": 0.25})  # the last: always printed
    assert out.getvalue().splitlines()[1] == "step 60/60 [100%] reward 0.50 0.25 s/step"
    logger.close()
    assert out.getvalue().count("\n") == 2


def test_progress_eta_from_mean_wall_time(tmp_path, monkeypatch):
    clock = iter([100.0, 103.0, 109.0])  # time.monotonic at three calls
    monkeypatch.setattr("rlvr_jax.run.logger.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    logger = MetricsLogger(tmp_path, tensorboard=False, stream=out, progress_every_s=0)
    logger.progress(1, 10, {})  # no step time known yet: no ETA
    logger.progress(2, 10, {"step_seconds": 60.0})  # 3 s/step measured -> 8 x 3 s
    logger.progress(4, 10, {})  # (109 - 100) / 3 steps = 3 s/step -> 6 x 3 s
    assert out.getvalue().splitlines() == [
        "step 1/10 [10%]",
        "step 2/10 [20%] 60.0 s/step eta 24s",
        "step 4/10 [40%] eta 18s",
    ]


def test_progress_rewrites_one_line_on_a_tty(tmp_path, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    clock = iter([0.0, 2.0, 4.0])
    monkeypatch.setattr("rlvr_jax.run.logger.time.monotonic", lambda: next(clock))
    out = Tty()
    logger = MetricsLogger(tmp_path, tensorboard=False, stream=out, progress_every_s=3600)
    logger.progress(1, 3, {"reward": 0.123, "kl": 0.5, "entropy": 1.25})
    logger.progress(2, 3, {"reward": 0.5})  # shorter: blanks pad over the previous line
    line1 = "step 1/3 [33%] reward 0.12 kl 0.5 ent 1.25"
    line2 = "step 2/3 [67%] reward 0.50 eta 2s"
    assert out.getvalue() == "\r" + line1 + "\r" + line2 + " " * (len(line1) - len(line2))
    logger.close()  # ends the open line
    assert out.getvalue().endswith(line2 + " " * (len(line1) - len(line2)) + "\n")


def test_format_duration():
    assert [format_duration(s) for s in (0, 45.4, 100, 3599, 7380)] == [
        "0s", "45s", "1m40s", "59m59s", "2h03m",
    ]  # fmt: skip


def test_truncate_keeps_exactly_the_steps_up_to_the_checkpoint(tmp_path):
    logger = MetricsLogger(tmp_path, stream=io.StringIO())
    for step in range(10):
        logger.log(step, {"reward": step / 10})
        if step % 3 == 0:
            logger.log(step, {"pass@1": step / 20}, split="eval")
    logger.close()
    before = _lines(tmp_path / "metrics.jsonl")

    # A resumed run: reopen, drop what came after the step-5 checkpoint, log on.
    logger = MetricsLogger(tmp_path, stream=io.StringIO())
    logger.truncate(5)
    after = _lines(tmp_path / "metrics.jsonl")
    assert after == [x for x in before if json.loads(x)["step"] <= 5]  # byte for byte
    assert [(r["step"], r["split"]) for r in read_metrics(tmp_path / "metrics.jsonl")] == [
        (0, "train"), (0, "eval"), (1, "train"), (2, "train"), (3, "train"), (3, "eval"),
        (4, "train"), (5, "train"),
    ]  # fmt: skip
    logger.log(6, {"reward": -1.0})
    logger.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records][-2:] == [5, 6] and records[-1]["reward"] == -1.0
    assert not list(tmp_path.glob("*.tmp*"))
    # Tensorboard: the resumed writer marks step 6 as the purge point.
    events = _read_events(tmp_path / "tensorboard")
    starts = [e.step for e in events if e.HasField("session_log")]
    assert 6 in starts


def test_existing_file_with_a_torn_last_line_is_repaired(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "split": "train", "reward": 1.0}\n{"step": 1, "spl')
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(1, {"reward": 2.0})
    logger.close()
    assert [(r["step"], r["reward"]) for r in read_metrics(path)] == [(0, 1.0), (1, 2.0)]


def test_malformed_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        MetricsLogger(tmp_path, tensorboard=False)
    path.write_text('{"step": 0}\n[1, 2]\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}:2") + ".*integer 'step'"):
        read_metrics(path)


def test_disabled_logger_writes_nothing(tmp_path):
    out = io.StringIO()
    workdir = tmp_path / "run"
    logger = MetricsLogger(workdir, enabled=False, stream=out)
    logger.log(0, {"reward": 1.0})
    logger.progress(1, 1, {"reward": 1.0})
    logger.truncate(0)
    logger.close()
    assert not workdir.exists() and out.getvalue() == ""
