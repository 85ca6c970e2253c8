"""Pipeline configs as reproduction arms: joined metrics, stage arms sharing a run, records."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at, pipelines, sweeps
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro.metrics import PASS_1_BEFORE, ROLLOUTS, metric_value
from rlvr_jax.repro.spec import Sweep
from tests.repro.conftest import page_text

SEQ = "seq_opd_rl/pipeline.py:sequential,pulse"
RL = "seq_opd_rl/pipeline.py:rl,pulse"


class FakePipeline:
    """Writes what `rlvr_jax.pipeline.run` writes: stages' metrics and stage.json, evals.

    Stage `n` of a run trains `steps[n]` steps (default its config's cap) and its
    export scores pass@1 = score(stage, seed); the base scores 0.1. A stage whose run
    sets `eval.validation_problems` logs val/pass@1 = validation(its run config). `stop_before`
    names a stage the next launch does not reach (a preempted pipeline).
    """

    def __init__(self, score, steps=None, validation=None):
        self.score, self.steps, self.validation = score, steps or {}, validation
        self.calls: list[tuple[str, int]] = []
        self.stop_before = ""

    def __call__(self, run, log) -> int:
        c, seed = run.config, run.seed
        self.calls.append((run.arm.name, seed))
        w = run.workdir
        (w / "eval").mkdir(parents=True, exist_ok=True)
        (w / "config.json").write_text(json.dumps(c))
        evals = {"base": 0.1}
        for n in pipelines.stage_names(c):
            if n == self.stop_before:
                self.stop_before = ""
                break
            cap = c["stages"][n]["run"]["train"]["steps"]
            k = self.steps.get(n, cap)
            d = w / "stages" / n
            d.mkdir(parents=True, exist_ok=True)
            lines = [
                {"step": s, "split": "train", "reward": 0.5, "sampled_groups": 2.0}
                for s in range(1, k + 1)
            ]
            final = {"step": k, "split": "eval", "pass@1": 0.0}  # the stage's own evaluation
            if c["stages"][n]["run"]["eval"].get("validation_problems"):
                final["val/pass@1"] = self.validation(c["stages"][n]["run"])
            lines.append(final)
            (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            (d / "stage.json").write_text(json.dumps({"kind": "rl", "steps": k}))
            evals[n] = self.score(n, seed)
        for model, p in evals.items():
            res = {"arithmetic": {"pass@1": p, "pass@2": min(1.0, 2 * p)}}
            (w / "eval" / f"{model}.json").write_text(json.dumps({"results": res}))
        return 0


def _repro(*arms, claims=()):
    return Reproduction(
        slug="seq",
        paper="seq paper",
        arms=arms,
        baseline=arms[-1].name,
        metrics=(PASS_1_BEFORE, PASS_1, pass_at(2), ROLLOUTS),
        claims=claims or (Claim("a beats b", "pass@1", arms[0].name, arms[-1].name, "higher"),),
    )


def _row(page: str, arm: str) -> str:
    """The arm's row of the results table (the page's first table)."""
    return next(line for line in page.splitlines() if line.startswith(f"| {arm} |"))


def test_pipeline_arms_are_seeded_per_stage_and_read_their_last_export(tmp_path):
    scores = {"opd": 0.4, "rl": 0.5, "rl_only": 0.3}
    fake = FakePipeline(lambda stage, seed: scores[stage] + 0.02 * seed)
    repro = _repro(Arm("sequential", SEQ), Arm("rl", RL, role="baseline"))
    runs = runs_lib.plan(repro, [1], tmp_path / "root")
    assert [r.command[-2:] for r in runs[:1]] == [
        ["--config.stages.opd.run.seed=1", "--config.stages.rl.run.seed=1"]
    ]
    assert runs[0].config["stages"]["opd"]["run"]["seed"] == 1
    page = page_text(repro, tmp_path, fake)
    assert fake.calls == [("sequential", 0), ("rl", 0), ("sequential", 1), ("rl", 1)]
    # pass@1 (%): sequential 50, 52 -> 51.0 ± 1.4; rl 30, 32 -> 31.0 ± 1.4; Δ +20.0.
    assert "| 51.0 ± 1.4 | +20.0 ± 1.4 |" in _row(page, "sequential")
    assert "10.0" in _row(page, "rl")  # pass@1 before: the base's evaluation
    assert "A pipeline from the" in page and "opd (opd, ≤ 3 steps)" in page


def test_stage_arms_of_one_pipeline_share_its_run(tmp_path):
    fake = FakePipeline(lambda stage, seed: {"opd": 0.4, "rl": 0.6}[stage])
    repro = _repro(
        Arm("after_rl", SEQ, stage="rl"), Arm("after_opd", SEQ, stage="opd", role="baseline")
    )
    page = page_text(repro, tmp_path, fake, seeds=(0,))
    assert fake.calls == [("after_rl", 0)]  # one pipeline run, two arms
    assert "| 60.0 (n=1) |" in _row(page, "after_rl")
    assert "| 40.0 (n=1) |" in _row(page, "after_opd")


def test_joined_series_offsets_stages_and_uses_the_steps_they_ran(tmp_path):
    # The OPD stage switched after 2 of its 3 steps; RL ran its 2.
    fake = FakePipeline(lambda stage, seed: 0.5, steps={"opd": 2})
    repro = _repro(Arm("sequential", SEQ), Arm("rl", RL, role="baseline"))
    page_text(repro, tmp_path, fake, seeds=(0,))
    run = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    records = [json.loads(x) for x in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["split"], r["step"], r["stage"]) for r in records] == [
        ("eval", 0, "base"),
        ("train", 1, "opd"),
        ("train", 2, "opd"),
        ("eval", 2, "opd"),
        ("train", 3, "rl"),
        ("train", 4, "rl"),
        ("eval", 4, "rl"),
    ]
    # "stage_steps": the steps a stage ran (the plateau switch's step for OPD)
    steps = {n: Metric(n, n, reduce="stage_steps") for n in ("opd", "rl", "sft")}
    assert {n: metric_value(records, 8, m) for n, m in steps.items()} == {
        "opd": 2.0,
        "rl": 2.0,
        "sft": 0.0,
    }
    plain = [r for r in records if r["split"] == "eval"]
    for r in plain:
        del r["stage"]
    assert math.isnan(metric_value(plain, 8, steps["opd"]))  # not a pipeline's series


def test_a_pipeline_stopped_before_its_last_stage_is_resumed(tmp_path):
    fake = FakePipeline(lambda stage, seed: 0.5)
    fake.stop_before = "rl"
    repro = _repro(Arm("sequential", SEQ), Arm("rl", RL, role="baseline"))
    page_text(repro, tmp_path, fake, seeds=(0,))
    runs = runs_lib.plan(repro, [0], tmp_path / "root")
    assert [r.status for r in runs] == ["interrupted", "done"]
    fake.calls.clear()
    page_text(repro, tmp_path, fake, seeds=(0,))
    assert fake.calls == [("sequential", 0)]
    assert runs_lib.plan(repro, [0], tmp_path / "root")[0].status == "done"


def test_pipeline_records_rebuild_the_page_on_a_fresh_root(tmp_path):
    fake = FakePipeline(lambda stage, seed: {"opd": 0.4, "rl": 0.5, "rl_only": 0.3}[stage])
    repro = _repro(Arm("sequential", SEQ), Arm("rl", RL, role="baseline"))
    before = page_text(repro, tmp_path, fake, seeds=(0,))
    shutil.rmtree(tmp_path / "root")
    fake.calls.clear()
    after = page_text(repro, tmp_path, fake, seeds=(0,), train=False, root="fresh")
    assert fake.calls == [] and _row(after, "sequential") == _row(before, "sequential")


def test_eval_record_of_several_tasks_is_their_mean():
    rec = pipelines.eval_record(
        {"countdown": {"pass@1": 0.2, "pass@8": 0.6}, "arithmetic": {"pass@1": 0.4}}, 7, "mix"
    )
    assert rec["step"] == 7 and rec["stage"] == "mix"
    assert rec["pass@1"] == pytest.approx(0.3) and rec["countdown/pass@8"] == 0.6
    assert rec["pass@8"] != rec["pass@8"]  # NaN: not every task reports it
    one = pipelines.eval_record({"countdown": {"pass@1": 0.2, "other": 3}}, 0, "base")
    assert one == {"step": 0, "split": "eval", "stage": "base", "pass@1": 0.2}
    # pass@k for every k of the evaluation's curve (k = 1..n), beside its own keys
    curve = pipelines.eval_record(
        {"arithmetic": {"pass@1": 0.5, "pass@4": 0.9, "passk": [0.5, 0.7, 0.8, 0.9]}}, 3, "rl"
    )
    assert {k: curve[k] for k in ("pass@1", "pass@2", "pass@3", "pass@4")} == {
        "pass@1": 0.5,
        "pass@2": 0.7,
        "pass@3": 0.8,
        "pass@4": 0.9,
    }
    assert "passk" not in curve


def test_a_sweep_of_a_stage_coefficient_reads_that_stage_validation_split(tmp_path):
    field = "stages.joint_additive.run.credit.opd_additive.weight"
    val = {0.1: 0.3, 1.0: 0.2}  # validation prefers 0.1; the test split (score) prefers 1
    fake = FakePipeline(
        lambda stage, seed: 0.1 + 0.2 * (stage == "joint_additive"),
        validation=lambda run: val[run["credit"]["opd_additive"]["weight"]],
    )
    joint = Arm("joint", "seq_opd_rl/pipeline.py:joint_additive,pulse", role="baseline")
    repro = dataclasses.replace(
        _repro(Arm("rl", RL), joint), sweeps=(Sweep("joint", field, (0.1, 1.0)),)
    )
    assert Sweep("joint", field, (0.1, 1.0)).stage == "stages.joint_additive.run."
    page = page_text(repro, tmp_path, fake, seeds=(0,))
    assert fake.calls == [("joint[0.1]", 0), ("joint[1]", 0), ("rl", 0)]
    assert "| joint | `" + field + "` | **30.0** | 20.0 | 0.1 |" in page
    run = runs_lib.plan(sweeps.sweep_reproduction(repro), [0], tmp_path / "root")[0]
    stage = run.config["stages"]["joint_additive"]["run"]
    assert stage["credit"]["opd_additive"]["weight"] == 0.1
    assert (
        stage["eval"]["validation_problems"] == 256
        and "validation_problems" not in (run.config["eval"])
    )


def test_a_sweep_spans_one_stage():
    with pytest.raises(ValueError, match="several pipeline stages"):
        Sweep("a", "stages.x.run.credit.w,stages.y.run.credit.w", (0.1, 1.0))
    assert Sweep("a", "credit.rstg.coef", (0.1, 1.0)).stage == ""
