"""Scoring: math answers through the repo's math-verify checker, letters, and programs
through a sandbox stand-in with the rlvr_jax.sandbox interface (and the real one once it exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_jax.eval import SUITES, CodeScorer
from rlvr_jax.eval.items import CodeTest, Item
from rlvr_jax.eval.scoring import build_program, score_choice, score_math
from rlvr_jax.tasks.base import MALFORMED
from tests.eval.fake_sandbox import FakePool, FakeSandbox, fence

DATA = Path(__file__).resolve().parent / "fixtures" / "data"


def _items(name):
    suite = next(s for s in SUITES.values() if name in [b.name for b in s.benchmarks])
    return suite.benchmark(name).load(DATA)[0]


def test_math_scoring_uses_equivalence_and_votes_on_normalised_answers():
    item = Item("p", "math", "Simplify $\\sqrt{50}$.", answer="5\\sqrt{2}")
    texts = [
        "so it is \\boxed{5\\sqrt{2}}",
        "\\boxed{\\sqrt{50}}",  # equal by math-verify, not by string
        "Answer: 7",
        "I do not know",
    ]
    out = score_math(item, texts, timeout_s=5.0)
    assert [s.correct for s in out] == [True, True, False, False]
    assert out[0].vote == "5\\sqrt{2}" and out[3].vote is None
    assert out[3].status == MALFORMED
    assert out[1].vote == out[0].vote  # both right: one vote, whatever the strings
    assert out[2].vote == "7"


def test_equivalent_wrong_answers_are_one_vote_and_win_the_majority():
    """Three wrong answers written three ways outvote two right ones written alike: maj@5
    is 0 (string votes would give the right answer the majority, 2 against 1 + 1 + 1)."""
    from rlvr_jax.eval.metrics import maj_at_k

    item = Item("p", "math", "What is 1/4 + 1/4?", answer="\\frac{1}{2}")
    texts = ["\\boxed{0.75}", "\\boxed{\\frac{3}{4}}", "\\boxed{1/2}", "\\boxed{3/4}",
             "\\boxed{1/2}", "\\boxed{2}"]  # fmt: skip
    out = score_math(item, texts, timeout_s=5.0)
    assert [s.correct for s in out] == [False, False, True, False, True, False]
    votes = [s.vote for s in out]
    assert votes[0] == votes[1] == votes[3] == "0.75"  # the first wrong answer's key
    assert votes[2] == votes[4] != votes[0] and votes[5] == "2"
    correct = [s.correct for s in out]
    assert maj_at_k(votes[:5], correct[:5], 5) == 0.0
    assert maj_at_k([t[7:-1] for t in texts[:5]], correct[:5], 5) == 1.0  # by string


def test_choice_scoring():
    item = _items("gpqa_diamond")[0]
    right = f"\\boxed{{{item.answer}}}"
    wrong = "\\boxed{" + next(c for c in "ABCD" if c != item.answer) + "}"
    out = score_choice(item, [right, wrong, "no idea"])
    assert [s.correct for s in out] == [True, False, False]
    assert [s.status for s in out] == ["correct", "wrong", "no_answer"]


def test_code_scoring_runs_each_program_with_its_tests_and_reports_pass_fraction():
    FakePool.jobs = []
    scorer = CodeScorer(2, sandbox=FakeSandbox)
    lcb_stdin, lcb_func = _items("livecodebench")
    out = scorer.score(lcb_stdin, [
        fence("a, b = map(int, input().split())\nprint(a + b)\n"),
        fence("print(3)\n"),  # passes the public test only
        "no program at all",
    ])  # fmt: skip
    assert [(s.correct, s.score, s.status) for s in out] == [
        (True, 1.0, "passed"), (False, 0.5, "failed"), (False, 0.0, "no_program")]  # fmt: skip
    assert len(FakePool.jobs) == 2  # a response without a program never runs
    good = "class Solution:\n    def double(self, x):\n        return 2 * x\n"
    assert scorer.score(lcb_func, [fence(good)])[0].correct

    he = _items("humanevalplus")[0]
    body_only = "    return a + b\n"
    assert build_program(he, body_only).startswith("def add(a: int, b: int)")
    full = "def add(a, b):\n    return a + b\n"
    assert build_program(he, full) == full
    out = scorer.score(he, [fence(full), fence("def add(a, b):\n    return a - b\n")])
    assert [s.correct for s in out] == [True, False]

    mb = _items("mbppplus")[1]  # needs its test_imports before the program
    assert scorer.score(mb, [fence("def root(x):\n    return math.sqrt(x)\n")])[0].correct


def test_code_scorer_refuses_when_the_sandbox_cannot_isolate():
    class _NoIsolation(FakeSandbox):
        @staticmethod
        def check_available():
            return "no user namespaces"

    item = Item("x", "code", "b", tests=(CodeTest(assertion="assert True"),))
    with pytest.raises(RuntimeError, match="cannot isolate.*no user namespaces"):
        CodeScorer(1, sandbox=_NoIsolation).score(item, [fence("pass\n")])


def test_code_scoring_in_the_real_sandbox():
    from rlvr_jax import sandbox

    sandbox.check_available()  # raises SandboxUnavailable, naming what is missing
    item = _items("livecodebench")[0]
    out = CodeScorer(2).score(
        item, [fence("a, b = map(int, input().split())\nprint(a + b)\n"), fence("print(3)\n")]
    )
    assert [s.correct for s in out] == [True, False]
    assert out[1].score == pytest.approx(0.5)
