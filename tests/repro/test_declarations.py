"""Every experiments/<slug>/repro.py loads, resolves to configs, and agrees with the catalogue."""

from __future__ import annotations

import pytest

from rlvr_jax.repro import declared_slugs, load_reproduction, pipelines
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro.catalogue import PAPERS

SLUGS = declared_slugs()


def test_catalogue_and_declarations_agree():
    papers = {p.slug: p for p in PAPERS}
    for slug, p in papers.items():
        # End to end today <=> a reproduction is declared.
        assert (slug in SLUGS) == (not (p.blocked or p.manual)), slug
    # The pages that are not seed papers (references and the rollout engine's RL step).
    assert set(SLUGS) - set(papers) <= {"baselines", "difficulty", "agentic", "engine", "async_rl"}


@pytest.mark.parametrize("slug", SLUGS)
def test_declaration_resolves(slug, tmp_path):
    repro = load_reproduction(slug)
    runs = runs_lib.plan(repro, [0], tmp_path)
    assert len(runs) == len(repro.arms)
    # Two arms of one page are different runs (a page never compares a config with
    # itself), unless they read different stages of one pipeline run.
    assert len({(r.key, r.arm.stage) for r in runs}) == len(runs)
    for r in runs:
        assert not r.arm.stage or r.arm.stage in pipelines.stage_names(r.config)
    for r in runs:
        assert r.status == "pending"
        fields = pipelines.seed_fields(r.config, 0)  # `seed`, or each pipeline stage's
        assert fields and all(_at(r.config, path) == 0 for path in fields)


def _at(config: dict, path: str):
    for part in path.split("."):
        config = config[part]
    return config


def test_shared_arms_are_shared_runs(tmp_path):
    """The GRPO baseline of every Countdown page is one run (one more on the privileged
    base, shared by the self-teacher pages); SARA's arm is graph_difficulty's."""
    keys: dict[str, set[str]] = {}
    pages: dict[str, set[str]] = {}
    for slug in SLUGS:
        for r in runs_lib.plan(load_reproduction(slug), [0], tmp_path):
            arm = f"{r.arm.name}:{r.arm.config}:{sorted(r.arm.overrides.items())}"
            keys.setdefault(arm, set()).add(r.key)
            pages.setdefault(arm, set()).add(slug)
    assert all(len(k) == 1 for k in keys.values()), {a: k for a, k in keys.items() if len(k) > 1}
    assert {"sara", "graph_difficulty"} <= pages["sara:sara/sara.py:[]"]
    privileged = "grpo:baselines/grpo.py:[('model.role', 'privileged')]"
    assert {"dash", "cpo", "h2sd", "cscr"} <= pages[privileged]
    assert keys[privileged] != keys["grpo:baselines/grpo.py:[]"]
    grpo = keys["grpo:baselines/grpo.py:[]"]
    assert len(grpo) == 1
