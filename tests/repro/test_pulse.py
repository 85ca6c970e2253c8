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
