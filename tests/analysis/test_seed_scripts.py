"""scripts/entrance_seeds.py and scripts/multilingual_seeds.py on constructed results."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entrance(tmp_path, name, coverage, pass1):
    """An entrance.json whose sweep has coverage / pass@1 per α (α = 0 first)."""
    sweep = [
        {"alpha": a, "coverage": c, "pass@1": p}
        for a, c, p in zip((0.0, 0.5, 1.0), coverage, pass1, strict=True)
    ]
    low = {"natural_completion": 0.01, "forced_completion": 0.3}
    d = {
        "interpolation": {"sweep": sweep},
        "eval": {"rl": {"pass@1": pass1[0], "coverage": coverage[0]}},
        "likelihood_shift": {"ratio": 5.0},
        "intervention": {"rl": {"summary": {"low_access": low}}},
    }
    run = tmp_path / name
    (run / "entrance").mkdir(parents=True)
    (run / "entrance" / "entrance.json").write_text(json.dumps(d))
    return str(run)


def test_entrance_seeds_relative_coverage_and_paired_se(tmp_path):
    es = _script("entrance_seeds")
    a = _entrance(tmp_path, "s0", (0.50, 0.55, 0.60), (0.30, 0.30, 0.28))
    b = _entrance(tmp_path, "s1", (0.40, 0.42, 0.40), (0.40, 0.41, 0.37))
    row = es.seed_row(json.loads(Path(a, "entrance", "entrance.json").read_text()))
    assert row["Δcov% α=0.5"] == pytest.approx(10.0) and row["Δcov% α=1"] == pytest.approx(20.0)
    assert row["Δpass@1 α=1"] == pytest.approx(-2.0)
    lines = es.table([a, b]).splitlines()
    head = [c.strip() for c in lines[0].split("|")[1:-1]]
    mean = dict(zip(head, [c.strip() for c in lines[-2].split("|")[1:-1]], strict=True))
    se = dict(zip(head, [c.strip() for c in lines[-1].split("|")[1:-1]], strict=True))
    # Δcov at α = 0.5: 10% and 5% -> mean 7.5, sd 3.536, s.e. 2.5
    assert mean["Δcov% α=0.5"] == "7.500 ± 3.536" and se["Δcov% α=0.5"] == "2.500"
    with pytest.raises(SystemExit, match="analyze_entrance"):
        es.table([str(tmp_path / "missing")])


def test_multilingual_seeds_native_and_transfer_gains():
    ms = _script("multilingual_seeds")
    langs = ["en", "es"]
    cells = {"base->en": 0.30, "base->es": 0.40, "en->en": 0.35, "en->es": 0.41}
    cells |= {"es->en": 0.32, "es->es": 0.46}
    m = {
        "rows": ["base", "en", "es", "merge:iso"],
        "cols": langs,
        "cells": {k: {"pass@1": v, "language_consistency": 0.99} for k, v in cells.items()},
    }
    row = ms.seed_row(m)
    # native: (+5, +6) -> 5.5 points; transfer: en->es +1, es->en +2 -> 1.5
    assert row["native gain"] == pytest.approx(5.5) and row["transfer gain"] == pytest.approx(1.5)
    assert row["native − transfer"] == pytest.approx(4.0) and row["min consistency"] == 0.99
    del m["cells"]["es->en"]
    with pytest.raises(SystemExit, match="es->en"):
        ms.seed_row(m)
