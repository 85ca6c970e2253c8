"""experiments/ebl: evaluations report coverage and entrance entropy; the pulse run feeds
scripts/analyze_entrance.py's library call with its step-1 checkpoint as the early one."""

import json

import numpy as np
import pytest

from rlvr_jax.analysis.entrance import EntranceOptions, analyze_entrance
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import validate

from ..rl.test_method_experiments import load
from ..rl.test_trainer import _parity_rewards


@pytest.mark.parametrize("variant", ["", "pulse"])
def test_ebl_config(variant):
    c = load("ebl/ebl", variant)
    validate(c)
    assert c.task.name == "countdown" and c.eval.n_samples >= 2
    if variant == "":
        assert c.eval.n_samples == 16 and c.checkpoint.every == 4 and c.checkpoint.keep >= 5


@pytest.mark.slow
def test_ebl_pulse_and_analysis(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    c = load("ebl/ebl", "pulse")
    trainer_lib.train(c, tmp_path)
    evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in evals if x["split"] != "train"]
    assert len(evals) == 2  # before and after
    for e in evals:
        assert 0 <= e["coverage"] <= 1 and e["entrance_entropy"] >= 0
    o = EntranceOptions(num_problems=2, n_samples=2, layers="-1:", alphas=(0.0, 1.0), window=2)
    r = analyze_entrance(tmp_path, "step:1", tmp_path / "entrance", o)
    assert r["early"] == "checkpoint step 1"
    assert [row["alpha"] for row in r["interpolation"]["sweep"]] == [0.0, 1.0]
    assert r["interpolation"]["sweep"][0]["pass@1"] == r["eval"]["rl"]["pass@1"]
    assert np.isfinite(r["intervention"]["rl"]["coverage_forced"])
    assert (tmp_path / "entrance" / "entrance.md").is_file()
