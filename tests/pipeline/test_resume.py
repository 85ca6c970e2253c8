"""A pipeline killed (SIGKILL) in stage 2 resumes that stage and ends as if never killed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config


def get_config(variant=""):
    c = pipeline_config()
    add_stage(c, "sft", "sft")
    add_stage(c, "opd", "opd")  # moves the weights every step, even at reward 0
    apply_pulse(c)
    c.stages.opd.run.train.steps = 4
    c.stages.opd.run.checkpoint.every = 1
    return c
"""
TIMING = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s")


def _cmd(config, workdir):
    return [sys.executable, "-m", "rlvr_jax.main", f"--config={config}", f"--workdir={workdir}"]


def _records(path):
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.slow
def test_kill_in_stage_two_resumes_stage_two_and_matches_uninterrupted(tmp_path):
    config = tmp_path / "pipe.py"
    config.write_text(CONFIG)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    out = subprocess.run(_cmd(config, straight), cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]

    proc = subprocess.Popen(
        _cmd(config, killed), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first = killed / "stages" / "opd" / "checkpoints" / "1"
    deadline = time.time() + 1200
    while not first.is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.is_dir(), "stage 2 never wrote its first checkpoint"
    assert (killed / "stages" / "sft" / "stage.json").is_file()
    assert not (killed / "stages" / "opd" / "stage.json").is_file()  # killed mid-stage 2
    sft_export = (killed / "stages" / "sft" / "export" / "model.safetensors").read_bytes()
    sft_metrics = (killed / "stages" / "sft" / "metrics.jsonl").read_bytes()

    out = subprocess.run(_cmd(config, killed), cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in out.stderr  # stage 2 restarted from its checkpoint
    # Stage 1 was not run again.
    assert (killed / "stages" / "sft" / "metrics.jsonl").read_bytes() == sft_metrics
    assert (killed / "stages" / "sft" / "export" / "model.safetensors").read_bytes() == sft_export
    for stage in ("sft", "opd"):
        a = (straight / "stages" / stage / "export" / "model.safetensors").read_bytes()
        b = (killed / "stages" / stage / "export" / "model.safetensors").read_bytes()
        assert a == b, stage  # bitwise
        ma = _records(straight / "stages" / stage / "metrics.jsonl")
        mb = _records(killed / "stages" / stage / "metrics.jsonl")
        assert [r for r in ma if r["split"] == "train"] == [r for r in mb if r["split"] == "train"]
    for model in ("base", "sft", "opd"):
        a = json.loads((straight / "eval" / f"{model}.json").read_text())["results"]
        b = json.loads((killed / "eval" / f"{model}.json").read_text())["results"]
        assert a == b
