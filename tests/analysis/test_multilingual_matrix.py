"""The train × eval matrix: its cells, resume from matrix.json, the tables and the heat map."""

import json

import pytest

from rlvr_jax.analysis import multilingual
from rlvr_jax.rl import trainer as trainer_lib

from ..rl.test_method_experiments import load


def _fake():
    rows, cols = ["base", "de"], ["en", "de"]
    cells = {
        f"{r}->{c}": {"pass@1": 0.1 * i + 0.01 * j, "language_consistency": 1.0 - 0.1 * j}
        for i, r in enumerate(rows)
        for j, c in enumerate(cols)
    }
    return {"rows": rows, "cols": cols, "cells": cells}


def test_markdown_and_heatmap(tmp_path):
    text = multilingual.markdown(_fake())
    assert "| train \\ eval | en | de |" in text
    assert "| de | 0.100 | 0.110 |" in text and "| base | 1.000 | 0.900 |" in text
    multilingual.heatmap(_fake(), tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 1000


@pytest.mark.slow
def test_matrix_trains_each_language_once_and_resumes(tmp_path, monkeypatch):
    make = lambda lang: load("multilingual/multilingual", f"{lang},pulse")  # noqa: E731
    kw = dict(num_problems=2, n_samples=2)
    r = multilingual.train_eval_matrix(make, ["de"], ["en", "de"], tmp_path, merges=["iso"], **kw)
    rows = ["base", "de", "merge:iso"]
    assert r["rows"] == rows
    assert sorted(r["cells"]) == sorted(f"{row}->{c}" for row in rows for c in ("en", "de"))
    for cell in r["cells"].values():
        assert 0 <= cell["pass@1"] <= 1 and 0 <= cell["language_consistency"] <= 1
    assert (tmp_path / "train_de" / "export" / "config.json").is_file() and "de" in r["cpu_seconds"]
    saved = json.loads((tmp_path / "matrix.json").read_text())
    assert saved["cells"] == r["cells"]

    # A second call finds every cell: nothing is trained or evaluated again.
    def refuse(*args, **kwargs):
        raise AssertionError("recomputed a cached cell")

    monkeypatch.setattr(multilingual, "evaluate_task", refuse)
    monkeypatch.setattr(trainer_lib, "train", refuse)
    again = multilingual.train_eval_matrix(
        make, ["de"], ["en", "de"], tmp_path, merges=["iso"], **kw
    )
    assert again["cells"] == r["cells"]
    with pytest.raises(ValueError, match="merge 'ties'"):
        multilingual.train_eval_matrix(make, ["de"], ["en"], tmp_path, merges=["ties"], **kw)
    with pytest.raises(ValueError, match="settings"):
        multilingual.train_eval_matrix(make, ["de"], ["en"], tmp_path, num_problems=3, n_samples=2)
