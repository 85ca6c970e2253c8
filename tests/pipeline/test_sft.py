"""The SFT stage: its data (reference / teacher / all-wrong filter) and its resume."""

import json
import os
import signal

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.pipeline import sft
from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config
from rlvr_jax.pipeline.run import run
from rlvr_jax.train import warmstart


def test_batch_order_is_seeded_epochs():
    a = sft.batch_order(10, 4, 6, seed=3)
    assert a.shape == (6, 4)
    np.testing.assert_array_equal(a, sft.batch_order(10, 4, 6, seed=3))
    flat = a.ravel()
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert not np.array_equal(a, sft.batch_order(10, 4, 6, seed=4))


def test_examples_reference_teacher_and_all_wrong(monkeypatch):
    task = tasks.get("arithmetic", **warmstart.TASK_OPTIONS["arithmetic"])
    c = sft.sft_config()
    c.data.num_problems, c.data.start = 6, 10
    problems = task.problems(6, "train", start=10)
    examples, stats = sft.build_examples(c, None, None, task, None)
    assert examples == [(p.prompt, p.solution) for p in problems] and stats["examples"] == 6

    # Scripted samplers: the policy solves problems 0 and 3 once; the teacher solves
    # every problem but 4, with its second sample only.
    def fake(model, tokenizer, task_, probs, *, n, seed, **kw):
        del tokenizer, task_, seed, kw
        idx = [problems.index(p) for p in probs]
        if model == "policy":
            return [[(f"p{i}", i in (0, 3) and j == 0) for j in range(n)] for i in idx]
        return [[(f"t{i}.{j}", i != 4 and j == 1) for j in range(n)] for i in idx]

    monkeypatch.setattr(sft, "sample_verified", fake)
    monkeypatch.setattr(sft, "_load_teacher", lambda c_, base: ("teacher", None))
    c.data.source, c.data.filter, c.data.teacher_samples = "teacher", "all_wrong", 3
    examples, stats = sft.build_examples(c, "policy", None, task, None)
    assert stats == dict(
        problems=6,
        all_wrong_problems=4,
        teacher_samples=12,
        teacher_solved_problems=3,
        examples=3,
    )
    assert examples == [(problems[i].prompt, f"t{i}.1") for i in (1, 2, 5)]


def _sft_pipeline():
    c = pipeline_config()
    s = add_stage(c, "sft", "sft")
    apply_pulse(c)
    s.run.train.steps = 4
    c.eval.enabled = False
    return c


@pytest.mark.slow
def test_sft_stage_preempted_and_resumed_equals_uninterrupted(tmp_path, monkeypatch):
    straight = run(_sft_pipeline(), tmp_path / "straight")
    assert straight["stages"]["sft"]["steps"] == 4

    original = sft.sft.make_train_step

    def preempting(graphdef, optimizer, **placement):  # mesh / rules, as the stage passes them
        step_fn = original(graphdef, optimizer, **placement)

        def step(state, rest, batch):
            if int(state.step) == 1:  # during step 2: the guard saves after it
                os.kill(os.getpid(), signal.SIGTERM)
            return step_fn(state, rest, batch)

        return step

    monkeypatch.setattr(sft.sft, "make_train_step", preempting)
    out = run(_sft_pipeline(), tmp_path / "resumed")
    assert out == {"preempted": True, "stage": "sft", "step": 2}
    monkeypatch.setattr(sft.sft, "make_train_step", original)
    run(_sft_pipeline(), tmp_path / "resumed")
    for d in ("straight", "resumed"):
        assert (tmp_path / d / "stages" / "sft" / "stage.json").is_file()
    a, b = (
        tmp_path / d / "stages" / "sft" / "export" / "model.safetensors"
        for d in ("straight", "resumed")
    )
    assert a.read_bytes() == b.read_bytes()
    lines = [
        [
            {k: v for k, v in json.loads(x).items() if k != "time"}
            for x in (tmp_path / d / "stages" / "sft" / "metrics.jsonl").read_text().splitlines()
            if json.loads(x)["split"] == "train"
        ]
        for d in ("straight", "resumed")
    ]
    assert lines[0] == lines[1] and len(lines[0]) == 4
