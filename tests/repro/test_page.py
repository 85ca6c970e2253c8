"""The page and summary writers on constructed results."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

from rlvr_jax.repro import Arm, Claim, Reproduction
from rlvr_jax.repro import summary as summary_lib
from rlvr_jax.repro.catalogue import PAPERS
from rlvr_jax.repro.metrics import PASS_1, ROLLOUTS
from rlvr_jax.repro.page import (
    claims_table,
    page_facts,
    page_summary,
    page_text,
    results_table,
    warm_start_line,
)
from rlvr_jax.repro.results import RunResult
from rlvr_jax.repro.runs import Run

REPRO = Reproduction(
    slug="toy",
    paper="Toy paper",
    arms=(Arm("base", "baselines/grpo.py", role="baseline"), Arm("m", "sara/sara.py")),
    baseline="base",
    metrics=(PASS_1, ROLLOUTS),
    claims=(
        Claim("m is better", "pass@1", "m", "base", "higher", "+5"),
        Claim("m is cheaper", "rollouts", "m", "base", "lower"),
    ),
)


def _results(values):
    out = []
    for (arm, seed), (p1, ro, status) in values.items():
        run = Run(
            REPRO.arm(arm),
            seed,
            {},
            f"k{arm}{seed}",
            None,
            ["python", "x"],
            {
                "status": status,
                "attempts": [
                    {
                        "start": "2026-12-03T00:00:00",
                        "wall_s": 60.0,
                        "cpu_s": 30.0,
                        "commit": "abc",
                        "machine": "cpu",
                    }
                ],
            },
        )
        vals = {"pass@1": p1, "rollouts": ro} if status == "done" else {}
        out.append(RunResult(run, vals))
    return out


RESULTS = _results(
    {
        ("base", 0): (0.30, 100, "done"),
        ("base", 1): (0.32, 120, "done"),
        ("base", 2): (0.31, 110, "done"),
        ("m", 0): (0.40, 100, "done"),
        ("m", 1): (0.42, 130, "done"),
        ("m", 2): (0.0, 0, "crashed"),
    }
)


def test_results_table_cells():
    lines = results_table(REPRO, RESULTS).splitlines()
    assert lines[0] == "| arm | role | runs done | pass@1 | Δ pass@1 | rollouts | Δ rollouts |"
    assert lines[2] == "| base | baseline | 3/3 | 31.0 ± 1.0 | (baseline) | 110 ± 10 | (baseline) |"
    # m: pass@1 41.0 ± 1.414; Δ = 10.0, s.e. = √(2/2 + 1/3)·1 = 1.155; rollouts 115 ± 21.2
    assert lines[3] == (
        "| m | method | 2/3 (1 crashed) | 41.0 ± 1.4 | +10.0 ± 1.2 | 115 ± 21 | +5 ± 16 |"
    )


def test_an_arm_with_its_own_baseline_is_compared_with_it():
    """Arms on another task (CBPO's @tool arms) take their Δ against their own baseline."""
    arms = REPRO.arms + (
        Arm("base@b", "baselines/grpo.py", role="baseline", baseline="base@b"),
        Arm("m@b", "sara/sara.py", baseline="base@b"),
    )
    repro = dataclasses.replace(REPRO, arms=arms)
    results = []
    for (arm, seed), (p1, ro) in {
        ("base", 0): (0.30, 100),
        ("base", 1): (0.32, 120),
        ("m", 0): (0.40, 100),
        ("m", 1): (0.42, 130),
        ("base@b", 0): (0.80, 10),
        ("base@b", 1): (0.80, 30),
        ("m@b", 0): (0.70, 20),
        ("m@b", 1): (0.72, 20),
    }.items():
        run = Run(repro.arm(arm), seed, {}, f"k{arm}{seed}", None, ["x"], {"status": "done"})
        results.append(RunResult(run, {"pass@1": p1, "rollouts": ro}))
    lines = results_table(repro, results).splitlines()
    assert lines[3].startswith("| m | method | 2/2 | 41.0 ± 1.4 | +10.0 ± 1.4 |")
    assert lines[4] == (
        "| base@b | baseline | 2/2 | 80.0 ± 0.0 | (baseline) | 20 ± 14 | (baseline) |"
    )
    assert lines[5] == "| m@b | method | 2/2 | 71.0 ± 1.4 | -9.0 ± 1.0 | 20 ± 0 | +0 ± 10 |"
    bad = dataclasses.replace(REPRO.arms[1], baseline="nope")
    with pytest.raises(ValueError, match="arm 'm' baseline 'nope'"):
        dataclasses.replace(REPRO, arms=(REPRO.arms[0], bad))


def test_before_rl_is_given_per_task_and_starting_policy():
    """A page with arms on two bases (OC-GRPO's @arith arms) gives one before-RL figure each."""
    from rlvr_jax.repro.page import _before_rl

    def result(arm, seed, task, before, status="done"):
        config = {"task": {"name": task}, "model": {"domain": task, "role": "base"}}
        run = Run(REPRO.arm(arm), seed, config, f"k{arm}{seed}{task}", None, ["x"], {})
        run.manifest["status"] = status
        return RunResult(run, {}, before=before)

    one = [result("base", 0, "countdown", 0.20), result("m", 0, "countdown", 0.22)]
    assert _before_rl(one) == [
        "- Before RL (the step-0 evaluation of the finished runs): held-out pass@1 21.0 ± 1.4 %."
    ]
    two = one + [
        result("m", 1, "arithmetic", 0.50),
        result("m", 2, "arithmetic", 0.54),
        result("m", 3, "arithmetic", 0.99, status="crashed"),  # not a finished run: left out
    ]
    (line,) = _before_rl(two)
    assert "21.0 ± 1.4 % on `countdown` from the countdown base (arms base, m)" in line
    assert "52.0 ± 2.8 % on `arithmetic` from the arithmetic base (arms m)." in line


def test_page_names_the_warm_start_weights_and_flags_a_retrained_one():
    assert "not recorded" in warm_start_line({})
    line = warm_start_line({"countdown-base-x": ["aaa"], "tool-base-y": ["bbb", "ccc"]})
    assert "`countdown-base-x` aaa;" in line
    assert "`tool-base-y` **bbb, ccc: retrained between runs" in line
    attempts = [{"warm_starts": {"w": "d1"}}, {"warm_starts": {"w": "d2"}}, {}]
    results = [
        RunResult(Run(REPRO.arms[0], i, {}, f"k{i}", None, ["x"], {"attempts": [a]}), {})
        for i, a in enumerate(attempts)
    ]
    assert page_facts(results)["warm_starts"] == {"w": ["d1", "d2"]}


def test_claims_table_verdicts():
    from rlvr_jax.repro.results import claim_results

    text = claims_table(REPRO, claim_results(REPRO, RESULTS))
    # Paired on seeds 0 and 1 (m's seed 2 crashed): pass@1 differences .10, .10 (s.e. 0);
    # rollouts 0, 10: mean 5, sd √50, s.e. √50/√2 = 5.
    assert (
        "| m is better | pass@1 | m > base | +5 | +10.0 ± 1.2 (+32%) | +10.0 ± 0.0 (2) "
        "| **reproduces** |" in text
    )
    assert (
        "| m is cheaper | rollouts | m < base | – | +5 ± 16 (+5%) | +5 ± 5 (2) | **not resolved "
        "at this scale** |" in text
    )


def test_claims_table_rows_keep_seven_cells_for_every_direction():
    """A "within" claim's comparison writes |Δ|: its pipes must not split the table cell."""
    from rlvr_jax.repro.results import claim_results

    claims = (
        Claim("m ties base", "pass@1", "m", "base", "within", margin=0.02),
        Claim("m costs little", "rollouts", "m", "base", "at_most", margin=0.1, relative=True),
    )
    repro = dataclasses.replace(REPRO, claims=claims)
    rows = claims_table(repro, claim_results(repro, RESULTS)).splitlines()
    body = [r for r in rows if r.startswith("| m ")]
    assert len(body) == 2
    for row in body:
        cells = re.split(r"(?<!\\)\|", row)[1:-1]  # split on unescaped pipes only
        assert len(cells) == 7, row
    assert "m ≈ base (\\|Δ\\| ≤ 2.0)" in body[0]


def test_page_lists_every_run_and_the_command():
    text = page_text(REPRO, RESULTS, seeds=[0, 1, 2], root="runs/repro", png="toy.png")
    assert "**reproduces**" in text.splitlines()[2]
    assert text.count("| m | 2 | crashed |") == 1
    assert "python scripts/reproduce.py toy --seeds 0,1,2 --root runs/repro" in text
    assert "6 distinct runs; 6.0 wall-minutes, 3.0 CPU-minutes" in text
    s = page_summary(REPRO, RESULTS, [0, 1, 2])
    assert s["claims"][0]["verdict"] == "reproduces" and s["crashed"] == 1


def test_a_measurement_outside_the_harness_with_seeds_counts_under_its_verdict(
    tmp_path, monkeypatch
):
    verdicts = {"ebl": "opposite", "multilingual": ""}  # one judged, one without seeds
    papers = tuple(
        dataclasses.replace(p, manual_verdict=verdicts[p.slug]) if p.slug in verdicts else p
        for p in PAPERS
    )
    monkeypatch.setattr(summary_lib, "PAPERS", papers)
    (tmp_path / "reproductions").mkdir()
    table = summary_lib.rows(tmp_path, tmp_path / "experiments")
    by = {r["slug"]: r for r in table}
    assert by["ebl"]["verdict"].startswith("opposite (measured outside the harness: ")
    assert by["multilingual"]["verdict"].startswith(summary_lib.MANUAL + " (")
    c = summary_lib.counts(table)
    assert c["opposite"] == 1 and c[summary_lib.MANUAL] == 1  # no page exists in tmp_path
    with pytest.raises(ValueError, match="manual_verdict 'works'"):
        dataclasses.replace(papers[0], manual="x", manual_verdict="works")


def test_summary_has_thirty_rows_and_counts(tmp_path):
    assert len({p.slug for p in PAPERS}) == len(PAPERS) == 30
    docs = tmp_path / "docs"
    (docs / "reproductions").mkdir(parents=True)
    (docs / "reproductions" / "sara.json").write_text(
        json.dumps(page_summary(REPRO, RESULTS, [0, 1, 2]))
    )
    exp = tmp_path / "experiments"
    (exp / "vigor").mkdir(parents=True)
    (exp / "vigor" / "repro.py").write_text("")
    table = summary_lib.rows(docs, exp)
    by = {r["slug"]: r for r in table}
    assert len(table) == 30
    assert by["sara"]["verdict"] == "reproduces" and "reproductions/sara.md" in by["sara"]["link"]
    # The headline's verdict is the row's; the other claims' verdicts are named in its result.
    assert by["sara"]["result"].endswith("; rollouts m vs base: not resolved at this scale")
    assert by["vigor"]["verdict"] == summary_lib.NOT_RUN
    assert by["spyrl"]["verdict"] == "no reproduction declared"  # no repro.py in `exp`
    # A row run outside the harness carries what its own page measured, and links it;
    # with the seeds for a verdict, that verdict (counted with the harness's).
    manual = [p for p in PAPERS if p.manual]
    for p in manual:
        row = by[p.slug]
        assert row["result"] == p.manual_result and p.manual_result, p.slug
        kind = p.manual_verdict or summary_lib.MANUAL
        assert row["verdict"].startswith(kind), p.slug
        target = row["link"].removeprefix("[page](").removesuffix(")")
        assert (summary_lib.REPO / "docs" / target).is_file(), row["link"]
    c = summary_lib.counts(table)
    assert c["reproduces"] == 1 and c[summary_lib.NOT_BUILT] == sum(bool(p.blocked) for p in PAPERS)
    assert c[summary_lib.MANUAL] == sum(bool(p.manual and not p.manual_verdict) for p in PAPERS)
    assert len(manual) == 2
    text = summary_lib.summary_text(docs, exp)
    assert text.count("\n| ") == 31  # header + 30 rows
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{summary_lib.README_BEGIN}\nold\n{summary_lib.README_END}\ntail\n")
    assert summary_lib.update_readme(readme, c)
    new = readme.read_text()
    assert "old" not in new and "reproduces: 1" in new and new.endswith("tail\n")


def test_a_claim_whose_arms_started_from_different_warm_start_weights_gets_no_verdict():
    from rlvr_jax.repro.results import claim_results
    from rlvr_jax.repro.stats import MIXED_WEIGHTS

    results = copy.deepcopy(RESULTS)

    def on(arm, digest):
        for r in results:
            if r.run.arm.name == arm:
                r.run.manifest["attempts"][-1]["warm_starts"] = {"countdown-base": digest}

    on("base", "aaa")
    on("m", "aaa")
    assert claim_results(REPRO, results)[0].verdict == "reproduces"  # one base: compared
    on("m", "bbb")  # the method's runs on a retrained base
    verdicts = [c.verdict for c in claim_results(REPRO, results)]
    assert verdicts == [MIXED_WEIGHTS, MIXED_WEIGHTS]
    results[0].run.manifest["attempts"][-1]["warm_starts"] = {"countdown-base": "bbb"}
    on("m", "aaa")  # one baseline seed on another base is enough to refuse
    assert claim_results(REPRO, results)[0].verdict == MIXED_WEIGHTS


def test_a_claim_whose_precondition_never_occurred_is_not_exercised():
    """m's runs logged 0 of the quantity its claim needs: no "reproduces", whatever Δ."""
    from rlvr_jax.repro.metrics import ROLLOUTS as R
    from rlvr_jax.repro.results import claim_results

    zero = _results(
        {
            ("base", 0): (0.30, 100, "done"),
            ("base", 1): (0.32, 120, "done"),
            ("m", 0): (0.40, 0, "done"),
            ("m", 1): (0.42, 0, "done"),
        }
    )
    claim = Claim("m is better", "pass@1", "m", "base", "higher", exercised=R.name)
    repro = dataclasses.replace(REPRO, claims=(claim,))
    (c,) = claim_results(repro, zero)
    assert c.verdict == "setup did not exercise the method (rollouts = 0 in m)"
    (c,) = claim_results(repro, RESULTS)  # m logged 100 and 130 rollouts: exercised
    assert c.verdict == "reproduces"
    with pytest.raises(ValueError, match="exercised names metric 'nope'"):
        dataclasses.replace(REPRO, claims=(dataclasses.replace(claim, exercised="nope"),))
