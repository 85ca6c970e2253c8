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
    """The headline, the verdict rule and every table row (paths, dates and machine
    lines differ by design)."""
    lines = text.splitlines()
    return [lines[2]] + [line for line in lines if line.startswith(("| ", "Rule: "))]


def _rebuild(slug: str, root: Path, docs: Path) -> str:
    seeds = json.loads((DOCS / f"{slug}.json").read_text())["seeds"]
    page = reproduce(
        load_reproduction(slug),
        seeds,
        root,
        train=False,
        docs=docs,
        records=DOCS / "records",
        echo=lambda *_: None,
        plot=False,
    )
    return page.read_text()


@pytest.mark.parametrize("slug", SLUGS)
def test_a_committed_page_rebuilds_from_its_records(slug, tmp_path, monkeypatch):
    monkeypatch.setattr(runs_lib, "warm_start_digests", lambda config: {})
    before = sorted((DOCS / "records").iterdir())
    page = _rebuild(slug, tmp_path / "root", tmp_path / "docs")
    assert _compared(page) == _compared((DOCS / f"{slug}.md").read_text())
    assert sorted((DOCS / "records").iterdir()) == before, "a rebuild wrote a record"


def test_every_page_rebuilt_into_one_root_matches_its_committed_page(tmp_path, monkeypatch):
    """Pages share runs (GRPO on the Countdown base) whose records have a version per
    machine; rebuilding them one after another into the same root must not leave one
    page's version for the next page (restored copies are chosen again per page)."""
    monkeypatch.setattr(runs_lib, "warm_start_digests", lambda config: {})
    differ = [
        slug
        for slug in SLUGS
        if _compared(_rebuild(slug, tmp_path / "root", tmp_path / "docs"))
        != _compared((DOCS / f"{slug}.md").read_text())
    ]
    assert not differ
