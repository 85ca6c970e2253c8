"""Tests of the Countdown task: solver, canonical forms, entrance families, verifier."""

import itertools
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import CORRECT, MALFORMED, REASONS, WRONG_ANSWER, Problem
from rlvr_jax.tasks.countdown import (
    canonical,
    check_expression,
    entrance_family,
    solution_coverage,
    solve,
    step_trace,
    trace_family,
)


def _brute_force(numbers, target, use_all=True, operators="+-*/"):
    """Canonical solutions by the plain combine-two search over expression strings.

    Independent of the solver: expressions are built as fully parenthesised
    strings from ordered pairs, evaluated here, and canonicalised by the parser.
    """
    found = set()

    def rec(items):  # items: list of (value, text)
        for value, text in items:
            if value == target and (len(items) == 1 or not use_all):
                found.add(canonical(text))
        for i, j in itertools.permutations(range(len(items)), 2):
            (a, sa), (b, sb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            for op in operators:
                if op == "/" and b == 0:
                    continue
                value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]
                rec(rest + [(value, f"({sa}{op}{sb})")])

    rec([(Fraction(n), str(n)) for n in numbers])
    return sorted(found)


def _problem(numbers, target, use_all=True, operators="+-*/"):
    sols = solve(numbers, target, use_all=use_all, operators=operators)
    meta = dict(numbers=numbers, target=target, use_all=use_all, operators=operators)
    return Problem("countdown/test/0", "", sols[0], "", {**meta, "num_solutions": len(sols)})


# ---- registry and options ----


def test_registry_and_defaults():
    task = tasks.get("countdown")
    assert task.name == "countdown" and task.num_numbers == 4 and task.use_all
    with pytest.raises(ValueError, match="num_number"):
        tasks.get("countdown", num_number=4)


@pytest.mark.parametrize(
    "options",
    [
        dict(num_numbers=1),
        dict(num_numbers=7),
        dict(min_number=0),
        dict(min_number=5, max_number=4),
        dict(max_number=10**6),
        dict(target_min=0),
        dict(target_min=50, target_max=10),
        dict(operators=""),
        dict(operators="+^"),
        dict(operators="++"),
        dict(use_all=1),
    ],
)
def test_bad_options_raise(options):
    with pytest.raises(ValueError):
        tasks.get("countdown", **options)


# ---- solver ----


def test_solver_hand_listed():
    # 1+2+3, 1*2*3 and 3*2/1 (= 3/(1/2) = 2/(1/3)); nothing else reaches 6.
    assert solve([1, 2, 3], 6) == ["3*2*1", "3*2/1", "3+2+1"]
    # At most once: also 3*2 and the bare 6-free subsets.
    assert solve([1, 2, 3], 6, use_all=False) == ["3*2", "3*2*1", "3*2/1", "3+2+1"]
    assert solve([1, 2, 3], 6, operators="+") == ["3+2+1"]
    assert solve([4, 4], 1) == ["4/4"]
    assert solve([5, 1], 5, use_all=False) == ["5", "5*1", "5/1"]
    assert solve([2, 3], 7) == []


@pytest.mark.parametrize(
    "numbers,target,use_all",
    [([1, 2, 3], 6, True), ([2, 2, 3], 4, True), ([3, 5, 7], 2, False), ([1, 1, 2], 1, True)],
)
def test_solver_matches_brute_force_three(numbers, target, use_all):
    assert solve(numbers, target, use_all=use_all) == _brute_force(numbers, target, use_all)


def test_solver_matches_brute_force_four():
    for numbers, target, use_all in [([3, 7, 8, 2], 24, True), ([2, 2, 6, 9], 12, False)]:
        assert solve(numbers, target, use_all=use_all) == _brute_force(numbers, target, use_all)
    assert solve([4, 6, 1, 3], 24, operators="+*") == _brute_force([4, 6, 1, 3], 24, True, "+*")


def test_solver_solutions_are_correct_and_fast():
    task = tasks.get("countdown")
    for p in task.problems(5, "validation"):
        m = p.metadata
        start = time.perf_counter()
        sols = solve(m["numbers"], m["target"])
        assert time.perf_counter() - start < 0.5  # ~25 ms; loose for a loaded CPU
        for s in sols:
            v = check_expression(s, m["numbers"], m["target"], True, "+-*/")
            assert v.reason == CORRECT and v.parsed == s


@pytest.mark.slow
def test_solver_five_and_six_numbers():
    numbers, target = [3, 7, 8, 2, 11], 50
    sols = solve(numbers, target)
    assert sols and all(check_expression(s, numbers, target, True, "+-*/").reward for s in sols)
    assert set(solve(numbers, target, use_all=False)) >= set(sols)
    task = tasks.get("countdown", num_numbers=5)
    for p in task.problems(3):
        assert task.verify(p, p.solution).reason == CORRECT
    p = tasks.get("countdown", num_numbers=6, max_number=10).problem(0)
    assert p.metadata["num_solutions"] >= 1


# ---- canonical forms, step traces, entrance families ----


@pytest.mark.parametrize(
    "a,b",
    [
        ("3+5", "5+3"),
        ("(3+5)+7", "3+(5+7)"),
        ("7-(5-3)", "7+3-5"),
        ("(7-5)-3", "7-(5+3)"),
        ("8/(4/2)", "8*2/4"),
        ("(8/4)/2", "8/(4*2)"),
        ("2*(3+4)", "(4+3)*2"),
        ("((((3))))", "3"),
        ("9 - 2 * 3", "9-3*2"),
        ("6 × 4 ÷ 2", "6*4/2"),
    ],
)
def test_canonical_equivalences(a, b):
    assert canonical(a) == canonical(b)


def test_canonical_orders_and_distinctions():
    forms = {canonical("*".join(p)) for p in itertools.permutations(["2", "3", "7"])}
    assert forms == {"7*3*2"}
    assert canonical("1+2") == "2+1" and canonical("(7-3)*6") == "6*(7-3)"
    assert canonical("5-3") != canonical("3-5")
    assert canonical("2*(3+4)") != canonical("2*3+2*4")  # no distributivity
    assert canonical("5*1") != canonical("5/1")
    for bad in ["", "3+", "(3", "3)", "-3", "2^3", "2**3", "3 = 3", "1/0", "1/(2-2)", "٣"]:
        with pytest.raises(ValueError):
            canonical(bad)


def test_step_trace_and_entrance_family():
    assert step_trace("(7-3)*6") == "7 - 3 = 4\n6 * 4 = 24"
    assert step_trace("2+3*4") == "4 * 3 = 12\n12 + 2 = 14"
    assert step_trace("1/2*3") == "3 * 1 = 3\n3 / 2 = 3/2"
    assert step_trace("5") == ""
    assert entrance_family("(7-3)*6") == ("7", "-")
    assert entrance_family("6*(3-7)") == entrance_family("(3-7)*6") == ("3", "-")
    assert entrance_family("8*3+2-1") == ("8", "*")
    assert entrance_family("1+2") == ("2", "+")
    assert entrance_family("5") == ("5", "")
    assert entrance_family("2+8*3-1") == entrance_family("8*3+2-1")


def test_trace_family_of_responses():
    assert trace_family("8 * 3 = 24\n24 + 2 = 26\nAnswer: 8*3+2") == ("8", "*")
    assert trace_family("Let me think.\n  7-3=4\n4 * 6 = 24") == ("7", "-")
    assert trace_family("7/2 * 4 = 14") == ("7/2", "*")
    assert trace_family("6 ÷ 3 = 2") == ("6", "/")
    assert trace_family("Answer: 3+5") is None
    assert trace_family(None) is None


# ---- generation ----


def test_determinism_and_splits():
    task = tasks.get("countdown")
    assert task.problem(3, "train") == tasks.get("countdown").problem(3, "train")
    assert task.problem(3, "train") != task.problem(3, "test")
    assert task.problem(3) != tasks.get("countdown", seed=1).problem(3)
    key = lambda p: (tuple(p.metadata["numbers"]), p.metadata["target"])
    train = {key(p) for p in task.problems(30, "train")}
    test = {key(p) for p in task.problems(30, "test")}
    assert not train & test


def test_generated_problems_verify():
    task = tasks.get("countdown")
    for p in task.problems(150):
        m = p.metadata
        assert 1 <= m["num_solutions"] and m["difficulty"] == 1 / m["num_solutions"]
        assert len(m["numbers"]) == 4 and all(1 <= n <= 20 for n in m["numbers"])
        assert 10 <= m["target"] <= 100 and f"Target: {m['target']}\n" in p.prompt
        assert task.verify(p, p.solution) == task.verify(p, "Answer: " + p.answer)
        assert task.verify(p, p.solution).reason == CORRECT
        assert task.verify(p, p.solution).parsed == p.answer
        if not m["solutions_truncated"]:
            assert p.answer in m["solutions"] and len(m["solutions"]) == m["num_solutions"]
        assert sum(m["entrance_families"].values()) == m["num_solutions"]
        assert " ".join(m["entrance_family"]) in m["entrance_families"]
        assert p.solution.endswith(f"\nAnswer: {p.answer}")
        assert trace_family(p.solution) == tuple(m["entrance_family"])


def test_difficulty_knobs():
    t3 = tasks.get("countdown", num_numbers=3, max_number=9, target_min=5, target_max=30)
    for p in t3.problems(20):
        assert len(p.metadata["numbers"]) == 3 and max(p.metadata["numbers"]) <= 9
        assert 5 <= p.metadata["target"] <= 30 and t3.verify(p, p.solution).reason == CORRECT
    plus_minus = tasks.get("countdown", operators="+-", target_min=1, target_max=40)
    for p in plus_minus.problems(20):
        assert all(c not in s for s in p.metadata["solutions"] for c in "*/")
        assert "with + -." in p.prompt and plus_minus.verify(p, p.solution).reason == CORRECT
    loose = tasks.get("countdown", use_all=False)
    for p in loose.problems(20):
        assert "at most once" in p.prompt and loose.verify(p, p.solution).reason == CORRECT
    # Fewer numbers give fewer solutions on average: difficulty goes up.
    mean_sols = [
        np.mean(
            [
                p.metadata["num_solutions"]
                for p in tasks.get("countdown", num_numbers=n).problems(20)
            ]
        )
        for n in (3, 4)
    ]
    assert mean_sols[0] < mean_sols[1]


# ---- verifier ----


@pytest.mark.parametrize(
    "response,reason,detail",
    [
        ("Answer: (7-3)*6", CORRECT, ""),
        ("steps...\nanswer = 6 * (7 - 3)", CORRECT, ""),
        ("\\boxed{(7-3)*6}", CORRECT, ""),
        ("Answer: (7-3)*6.", CORRECT, ""),
        ("Answer: 7*6-3", WRONG_ANSWER, "value 39"),
        ("Answer: (7-6)*3", WRONG_ANSWER, "value 3"),
        ("Answer: (7-3)*6*3", MALFORMED, "used 2 times"),
        ("Answer: 7*3+3", MALFORMED, "used 2 times"),
        ("Answer: (8-2)*4", MALFORMED, "not one of the numbers"),
        ("Answer: 7*3", MALFORMED, "not used"),
        ("Answer: (7-3)*6 = 24", MALFORMED, "'='"),
        ("(7-3)*6", MALFORMED, "Answer"),
        ("Answer: ", MALFORMED, "Answer"),
        ("Answer: 6/(3-3)*7", MALFORMED, "used 2 times"),
        ("Answer: 2^3", MALFORMED, "exponent"),
        ("Answer: (7-3)*٦", MALFORMED, "non-ASCII digit"),
        ("Answer: -3+7+6", MALFORMED, "unary minus"),
        ("Answer: ((7-3)*6", MALFORMED, "parenthes"),
        ("Answer: 7 3 6", MALFORMED, "unexpected"),
    ],
)
def test_verify_hand_cases(response, reason, detail):
    problem = _problem([7, 3, 6], 24)
    verdict = tasks.get("countdown").verify(problem, response)
    assert verdict.reason == reason and detail in verdict.detail
    assert verdict.reward == (1.0 if reason == CORRECT else 0.0)
    if reason != MALFORMED:
        assert verdict.parsed is not None
    if reason == CORRECT:
        assert verdict.parsed == "6*(7-3)"


def test_verify_rules():
    task = tasks.get("countdown")
    loose = _problem([7, 3, 6, 5], 24, use_all=False)
    assert task.verify(loose, "Answer: (7-3)*6").reason == CORRECT
    assert task.verify(_problem([2, 2, 3], 7), "Answer: 2+2+3").reason == CORRECT
    assert task.verify(_problem([2, 2, 3], 7), "Answer: 2+3+3").reason == MALFORMED
    no_div = _problem([8, 4, 2], 6, operators="+-*")
    assert task.verify(no_div, "Answer: (8+4)/2").reason == MALFORMED
    assert task.verify(_problem([1, 2, 4], 8), "Answer: 1/2*4").reason == WRONG_ANSWER
    zero = task.verify(_problem([3, 3, 7], 7), "Answer: 7/(3-3)")
    assert zero.reason == MALFORMED and "division by zero" in zero.detail
    unused = task.verify(_problem([7, 3, 6], 24), "Answer: 7*3")
    assert unused.parsed == "7*3"  # parsed even when a rule is broken
    deep = "Answer: " + "(" * 30 + "7-3" + ")" * 30 + "*6"
    assert task.verify(_problem([7, 3, 6], 24), deep).reason == CORRECT


def test_solution_coverage():
    problem = _problem([1, 2, 3], 6)  # solutions: 3*2*1, 3*2/1, 3+2+1
    assert solution_coverage([], problem) == 0.0
    assert solution_coverage(["Answer: 1+2+3", "3+2+1", "1*(2*3)"], problem) == pytest.approx(2 / 3)
    wrong = ["Answer: 1+2", "Answer: 3*3", "Answer: 7", "garbage", None]
    assert solution_coverage(["x\nAnswer: 2*3/1", *wrong], problem) == pytest.approx(1 / 3)
    all_three = ["Answer: 3+2+1", "Answer: 2*1*3", "Answer: 3/(1/2)"]
    assert solution_coverage(all_three, problem) == 1.0


# ---- robustness ----

_ADVERSARIAL = [
    "9**9**9**9",
    "10^100000",
    "9" * 100_000,
    "1" + "0" * 5000 + "/7",
    "x" * 100_000,
    "(" * 50_000,
    ")" * 50_000 + "(",
    "(" * 1000 + "3" + ")" * 1000,
    "(" * 40 + "7-3" + ")" * 40 + "*6",
    "٣+٤",
    "３＋４",
    "__import__('os').system('x')",
    "\x00" * 1000,
    "7\x003",
    "1/0",
    "((7-3)*6",
    "+" * 10_000,
    "Answer: " * 20_000,
    "\\boxed{" * 5000,
    "1e100000",
    "7-3*6" * 100,
    "",
]


def _assert_robust(task, problem, response):
    start = time.perf_counter()
    verdict = task.verify(problem, response)
    assert time.perf_counter() - start < 0.1
    assert verdict.reason in REASONS


@pytest.mark.parametrize("text", _ADVERSARIAL)
def test_adversarial_strings(text):
    task, problem = tasks.get("countdown"), _problem([7, 3, 6], 24)
    for response in (text, "Answer: " + text, f"\\boxed{{{text}}}"):
        _assert_robust(task, problem, response)
        assert task.verify(problem, response).reason in (MALFORMED, WRONG_ANSWER)
    start = time.perf_counter()
    solution_coverage([text, "Answer: " + text], problem)
    trace_family(text)
    assert time.perf_counter() - start < 0.1


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text(text):
    task, problem = tasks.get("countdown"), _problem([7, 3, 6], 24)
    for response in (text, "Answer: " + text):
        _assert_robust(task, problem, response)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/() 367", max_size=40))
def test_fuzz_expression_alphabet(text):
    # Near-valid expressions: never raise, and canonical forms are idempotent.
    task, problem = tasks.get("countdown"), _problem([7, 3, 6], 24, use_all=False)
    _assert_robust(task, problem, "Answer: " + text)
    try:
        form = canonical(text)
    except ValueError:
        return
    assert canonical(form) == form
