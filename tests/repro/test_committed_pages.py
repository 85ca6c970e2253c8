"""Every committed reproduction page rebuilds from its records on a fresh root.

This is the promise of docs/reproductions.md: a clone with no runs and no warm
start cached (`runs.warm_start_digests` → {}) rebuilds each page, with
`--no-train`, to the same verdicts, tables and runs. It would have caught h2sd rebuilt
on the other machine's GRPO/OPSD records: warm-start votes split across records
naming different subsets of one machine's warm starts tied, and the tie went by set
order (with the old `preferred_weights` it failed under 4 of 5 PYTHONHASHSEEDs), and
a page whose runs had no records (agentic). Not slow: ~5 s for every page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_jax.repro import reproduce
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro.harness import load_reproduction

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reproductions"
SLUGS = sorted(p.stem for p in DOCS.glob("*.json"))


def _compared(text: str) -> list[str]:
    """The headline and every table row (paths, dates and machine lines differ by design)."""
    lines = text.splitlines()
    return [lines[2]] + [line for line in lines if line.startswith("| ")]


@pytest.mark.parametrize("slug", SLUGS)
def test_a_committed_page_rebuilds_from_its_records(slug, tmp_path, monkeypatch):
    monkeypatch.setattr(runs_lib, "warm_start_digests", lambda config: {})
    seeds = json.loads((DOCS / f"{slug}.json").read_text())["seeds"]
    before = sorted((DOCS / "records").iterdir())
    page = reproduce(
        load_reproduction(slug),
        seeds,
        tmp_path / "root",
        train=False,
        docs=tmp_path / "docs",
        records=DOCS / "records",
        echo=lambda *_: None,
        plot=False,
    )
    assert _compared(page.read_text()) == _compared((DOCS / f"{slug}.md").read_text())
    assert sorted((DOCS / "records").iterdir()) == before, "a rebuild wrote a record"
