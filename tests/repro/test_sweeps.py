"""Coefficients chosen on the validation split: candidates, the choice, the page, records."""

from __future__ import annotations

import json

import pytest

from rlvr_jax.repro import Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro.metrics import PASS_1
from rlvr_jax.repro.spec import Sweep
from tests.repro.conftest import FakeTrainer, page_text

FIELD = "credit.rstg.coef"
# Validation favours 0.3, the test split 1.0: the choice must read the validation keys.
VAL = {0.1: 0.20, 0.3: 0.50, 1.0: 0.40}
TEST = {0.1: 0.10, 0.3: 0.30, 1.0: 0.60}


class SweepTrainer(FakeTrainer):
    """FakeTrainer whose final record also holds val/pass@1 when the run asks for it,
    both depending on the run's coefficient."""

    def __init__(self):
        super().__init__(lambda arm, seed: 0.3)

    def __call__(self, run, log) -> int:
        code = super().__call__(run, log)
        if code or not (run.workdir / "metrics.jsonl").is_file():
            return code
        coef = run.config["credit"]["rstg"]["coef"]
        lines = [json.loads(x) for x in (run.workdir / "metrics.jsonl").read_text().splitlines()]
        last = lines[-1]
        if last["split"] == "eval" and last["step"] == run.steps:
            if run.arm.name.startswith("rstg"):
                last["pass@1"] = TEST[coef] + 0.01 * run.seed
            if run.config["eval"]["validation_problems"]:
                last["val/pass@1"] = VAL.get(coef, 0.0)
        (run.workdir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return code


def _repro(values=(0.1, 0.3, 1.0), seeds=(0,)) -> Reproduction:
    return Reproduction(
        slug="rstg_sweep",
        paper="sweep paper",
        arms=(
            Arm("grpo", "baselines/grpo.py:pulse", role="baseline"),
            Arm("rstg", "rstg/rstg.py:pulse"),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(2)),
        claims=(Claim("RSTG beats GRPO", "pass@1", "rstg", "grpo", "higher"),),
        sweeps=(Sweep("rstg", FIELD, values, seeds=seeds),),
    )


def test_the_value_with_the_best_validation_metric_is_chosen_and_its_run_reused(tmp_path):
    fake = SweepTrainer()
    text = page_text(_repro(), tmp_path, fake, seeds=(0, 1))
    # The candidates first; rstg seed 0 is the chosen candidate's run (not launched again).
    assert fake.calls == [
        ("rstg[0.1]", 0),
        ("rstg[0.3]", 0),
        ("rstg[1]", 0),
        ("grpo", 0),
        ("grpo", 1),
        ("rstg", 1),
    ]
    runs = {(r.arm.name, r.seed): r for r in runs_lib.plan(_repro(), [0, 1], tmp_path / "root")}
    assert runs["rstg", 0].config["credit"]["rstg"]["coef"] == 1.0  # as declared
    summary = json.loads((tmp_path / "docs" / "rstg_sweep.json").read_text())
    assert summary["sweeps"]["rstg"] == {
        "field": FIELD,
        "seeds": [0],
        "validation": {"0.1": 20.0, "0.3": 50.0, "1": 40.0},
        "chosen": 0.3,
    }
    assert "## Coefficients chosen on the validation split" in text
    assert "| rstg | `credit.rstg.coef` | 20.0 | **50.0** | 40.0 | 0.3 |" in text
    assert "`credit.rstg.coef=0.3`, `eval.validation_problems=256`" in text  # the arm's line
    # The arm's test pass@1 is the chosen value's (30, 31), not the best test value's (60).
    assert "30.5 ± 0.7" in text


def test_a_page_rebuilt_from_records_makes_the_same_choice(tmp_path):
    fake = SweepTrainer()
    first = page_text(_repro(), tmp_path, fake, seeds=(0, 1))
    fake.calls.clear()
    again = page_text(_repro(), tmp_path, fake, seeds=(0, 1), root="fresh", train=False)
    assert fake.calls == []
    strip = lambda t: [x for x in t.splitlines() if "root" not in x and "written" not in x]  # noqa: E731
    assert strip(first) == strip(again)


def test_an_unfinished_sweep_trains_no_run_of_its_arm(tmp_path):
    fake = SweepTrainer()
    fake.crash.add(("rstg[0.3]", 0))
    text = page_text(_repro(), tmp_path, fake, seeds=(0, 1))
    assert ("rstg", 1) not in fake.calls and ("grpo", 1) in fake.calls
    assert "not yet (2 of 3 runs)" in text


def test_a_tie_goes_to_the_first_value(tmp_path, monkeypatch):
    monkeypatch.setitem(VAL, 1.0, VAL[0.3])
    page_text(_repro(values=(1.0, 0.3)), tmp_path, SweepTrainer(), seeds=(0,))
    summary = json.loads((tmp_path / "docs" / "rstg_sweep.json").read_text())
    assert summary["sweeps"]["rstg"]["chosen"] == 1.0


def test_declarations_are_checked():
    base = _repro()
    arms = base.arms + (Arm("opd", "baselines/grpo.py:pulse", role="baseline"),)
    with pytest.raises(ValueError, match="sweep of arm 'nope'"):
        Reproduction(**{**base.__dict__, "sweeps": (Sweep("nope", FIELD, (0.1, 1.0)),)})
    with pytest.raises(ValueError, match="every swept arm gets the same sweep"):
        Reproduction(
            **{
                **base.__dict__,
                "arms": arms,
                "sweeps": (Sweep("rstg", FIELD, (0.1, 1.0)), Sweep("opd", FIELD, (0.3, 1.0))),
            }
        )
    with pytest.raises(ValueError, match="an arm has two sweeps"):
        Reproduction(**{**base.__dict__, "sweeps": (Sweep("rstg", FIELD, (0.1, 1.0)),) * 2})
    with pytest.raises(ValueError, match="2 distinct values"):
        Sweep("rstg", FIELD, (1.0,))
    with pytest.raises(ValueError, match="empty or repeated path"):
        Sweep("rstg", f"{FIELD},{FIELD}", (0.1, 1.0))


def test_a_sweep_over_several_fields_sets_each_to_the_value():
    """One coefficient in two paths (CPO's λ on correct and wrong rows): every candidate sets
    both to its value, and the other overrides of the arm stay."""
    from rlvr_jax.repro.sweeps import candidate

    two = "credit.cpo.lam_correct, credit.cpo.lam_wrong"
    sweep = Sweep("cpo", two, (0.1, 0.3))
    assert sweep.fields == ("credit.cpo.lam_correct", "credit.cpo.lam_wrong")
    arm = Arm("cpo", "cpo/cpo.py", {"model.role": "privileged"})
    got = candidate(arm, sweep, 0.3)
    assert got.name == "cpo[0.3]"
    assert got.overrides == {
        "model.role": "privileged",
        "credit.cpo.lam_correct": 0.3,
        "credit.cpo.lam_wrong": 0.3,
        "eval.validation_problems": 256,
    }
