"""The harness through the real trainer: two `:pulse` arms, one seed (slow: ~1 CPU-minute)."""

from __future__ import annotations

import json

import pytest

from rlvr_jax.repro import reproduce
from rlvr_jax.repro import runs as runs_lib
from tests.repro.conftest import pulse_repro


@pytest.mark.slow
def test_pulse_page_through_the_trainer(tmp_path):
    repro = pulse_repro("cue_grpo", "cue", "cue_grpo/cue_grpo.py")
    quiet = lambda *_: None  # noqa: E731
    page = reproduce(repro, [0], tmp_path / "root", docs=tmp_path / "docs", echo=quiet)
    runs = runs_lib.plan(repro, [0], tmp_path / "root")
    assert [r.status for r in runs] == ["done", "done"]
    for r in runs:  # the trainer's config.json is the config the harness keyed the run by
        assert json.loads((r.workdir / "config.json").read_text()) == r.config
        attempt = r.manifest["attempts"][0]
        assert attempt["rc"] == 0 and attempt["cpu_s"] > 0 and attempt["wall_s"] > 0
    text = page.read_text()
    assert "| cue | 0 | done |" in text and "| grpo | 0 | done |" in text
    summary = json.loads(page.with_suffix(".json").read_text())
    assert summary["runs"] == 2 and summary["crashed"] == 0
    # Rebuilding the page starts nothing.
    calls = []
    reproduce(
        repro,
        [0],
        tmp_path / "root",
        docs=tmp_path / "docs",
        echo=quiet,
        launch=lambda run, log: calls.append(run) or 1,
    )
    assert calls == []


@pytest.mark.slow
def test_pipeline_arm_through_the_pipeline_runner(tmp_path):
    from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction

    seq = "seq_opd_rl/pipeline.py:sequential,pulse"
    repro = Reproduction(
        slug="seq",
        paper="seq paper",
        arms=(Arm("sequential", seq), Arm("opd_stage", seq, stage="opd", role="baseline")),
        baseline="opd_stage",
        metrics=(PASS_1,),
        claims=(
            Claim("OPD then RL beats its OPD stage", "pass@1", "sequential", "opd_stage", "higher"),
        ),
    )
    quiet = lambda *_: None  # noqa: E731
    page = reproduce(repro, [1], tmp_path / "root", docs=tmp_path / "docs", echo=quiet)
    (run, same) = runs_lib.plan(repro, [1], tmp_path / "root")
    assert run.key == same.key and run.status == "done"  # two arms, one pipeline run
    assert run.manifest["attempts"][0]["rc"] == 0
    evals = {}
    for model in ("base", "opd", "rl"):
        res = json.loads((run.workdir / "eval" / f"{model}.json").read_text())["results"]
        (task,) = res.values()
        evals[model] = task["pass@1"]
    records = [json.loads(x) for x in (run.workdir / "metrics.jsonl").read_text().splitlines()]
    finals = {r["stage"]: r["pass@1"] for r in records if r["split"] == "eval"}
    assert finals == evals  # the joined series carries each export's evaluation
    stage_cfg = json.loads((run.workdir / "stages" / "rl" / "config.json").read_text())
    assert stage_cfg["seed"] == 1  # the harness's seed reached the stage's run
    text = page.read_text()
    assert f"{100 * evals['rl']:.1f} (n=1)" in text and f"{100 * evals['opd']:.1f} (n=1)" in text
