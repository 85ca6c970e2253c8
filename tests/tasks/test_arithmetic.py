"""Tests of the arithmetic task: generation, verifier, step locator, cues, robustness."""

import ast
import itertools
import operator
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import REASONS, arithmetic
from rlvr_jax.tasks.arithmetic import (
    STEP_ARITHMETIC,
    STEP_INVALID,
    STEP_MISSING,
    STEP_OK,
    STEP_UNPARSABLE,
    STEP_WRONG_FINAL,
    first_wrong_step,
    response_cue,
    token_span,
)
from rlvr_jax.tasks.base import CORRECT, MALFORMED, WRONG_ANSWER


def make(expression):
    return arithmetic.build_problem("t/0", arithmetic.parse_expression(expression))


def oracle(expression):
    """Independent evaluation of a generated (trusted) expression through Python's ast."""
    fns = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def ev(node):
        if isinstance(node, ast.BinOp):
            return fns[type(node.op)](ev(node.left), ev(node.right))
        return node.value

    return ev(ast.parse(expression, mode="eval").body)


def trace_values(solution):
    steps = [arithmetic.parse_step_line(line) for line in solution.splitlines()[:-1]]
    return [v for s in steps for v in (s[0], s[2], s[3])]


# ---- generation ----------------------------------------------------------------------------


def test_registry_and_option_errors():
    task = tasks.get("arithmetic", num_operands=3, seed=1)
    assert isinstance(task, arithmetic.ArithmeticTask) and task.num_operands == 3
    with pytest.raises(ValueError, match="valid"):
        tasks.get("arithmetic", num_operand=3)
    for bad in (dict(num_operands=1), dict(operators="/"), dict(operators=""), dict(max_operand=0)):
        with pytest.raises(ValueError):
            tasks.get("arithmetic", **bad)


def test_determinism_splits_seeds():
    task = tasks.get("arithmetic")
    assert task.problem(5, "train") == tasks.get("arithmetic").problem(5, "train")
    train = [task.problem(i, "train").metadata["expression"] for i in range(200)]
    assert train != [task.problem(i, "test").metadata["expression"] for i in range(200)]
    other = tasks.get("arithmetic", seed=1)
    assert train != [other.problem(i, "train").metadata["expression"] for i in range(200)]
    big = tasks.get("arithmetic", num_operands=5)
    tr = {big.problem(i, "train").prompt for i in range(200)}
    te = {big.problem(i, "test").prompt for i in range(200)}
    assert not tr & te


@pytest.mark.parametrize(
    "options",
    [
        {},
        dict(num_operands=2),
        dict(num_operands=6, allow_parentheses=False),
        dict(num_operands=8, max_operand=99),
        dict(operators="-", num_operands=5, allow_parentheses=False),
        dict(operators="*", num_operands=6),
    ],
)
def test_reference_solutions_verify_and_match_oracle(options):
    task = tasks.get("arithmetic", **options)
    for p in task.problems(100, "validation"):
        meta = p.metadata
        assert task.verify(p, p.solution).reason == CORRECT
        assert first_wrong_step(p, p.solution).reason == STEP_OK
        assert response_cue(p, p.solution) == meta["cue"]
        assert oracle(meta["expression"]) == meta["value"] == int(p.answer)
        assert meta["num_steps"] == len(p.solution.splitlines()) - 1 == task.num_operands - 1
        tree = arithmetic.parse_expression(meta["expression"])
        assert arithmetic.render(tree) == meta["expression"]  # minimal parentheses round trip
        assert all(abs(v) <= arithmetic.VALUE_BOUND for v in trace_values(p.solution))


def test_difficulty_knobs():
    small = tasks.get("arithmetic", max_operand=5).problems(100)
    assert max(max(p.metadata["operands"]) for p in small) <= 5
    flat = tasks.get("arithmetic", allow_parentheses=False, num_operands=5).problems(100)
    assert all("(" not in p.metadata["expression"] for p in flat)
    tree = tasks.get("arithmetic", num_operands=5).problems(100)
    assert any("(" in p.metadata["expression"] for p in tree)
    plus = tasks.get("arithmetic", operators="+").problems(50)
    assert all(set(p.metadata["ops"]) == {"+"} for p in plus)
    default = tasks.get("arithmetic").problems(300)
    assert all(v >= 0 for p in default for v in trace_values(p.solution))  # no negatives
    assert {p.metadata["num_orders"] for p in default} == {1, 2}  # 4 operands: cues vary


# ---- hand-computed traces ------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, trace, cue, orders",
    [
        ("(7 + 5) * 3 - 4", "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\nAnswer: 32", "0,1,2", 1),
        ("2 + 3 * 4 - 5", "3 * 4 = 12\n2 + 12 = 14\n14 - 5 = 9\nAnswer: 9", "1,0,2", 1),
        ("2 * 3 + 4 * 5", "2 * 3 = 6\n4 * 5 = 20\n6 + 20 = 26\nAnswer: 26", "0,2,1", 2),
        ("8 - (3 - 1)", "3 - 1 = 2\n8 - 2 = 6\nAnswer: 6", "1,0", 1),
        ("3 - 5 * 2", "5 * 2 = 10\n3 - 10 = -7\nAnswer: -7", "1,0", 1),
    ],
)
def test_hand_computed_traces(expression, trace, cue, orders):
    p = make(expression)
    assert p.solution == trace and p.metadata["cue"] == cue
    assert p.metadata["num_orders"] == orders
    assert p.prompt.startswith(f"Evaluate: {expression}\n") and 'Answer: <integer>"' in p.prompt
    assert arithmetic.render(arithmetic.parse_expression(expression)) == expression


def test_num_orders_hook_formula():
    # ((1+2)*(3+4))*(5+6): 5 operations, subtree sizes 1,1,3,1,5 -> 5!/15 = 8.
    assert arithmetic.num_orders(arithmetic.parse_expression("(1 + 2) * (3 + 4) * (5 + 6)")) == 8


# ---- verify --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response, reason",
    [
        ("7 + 5 = 12\nAnswer: 32", CORRECT),
        ("Answer: 32.", CORRECT),
        ("Answer: +32", CORRECT),
        ("\\boxed{32}", CORRECT),
        ("Answer: 33", WRONG_ANSWER),
        ("Answer: -32", WRONG_ANSWER),
        ("7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32", MALFORMED),
        ("Answer: ٣٢", MALFORMED),
        ("Answer: ３２", MALFORMED),
        ("Answer: 3 2", MALFORMED),
        ("Answer: thirty-two", MALFORMED),
        ("Answer: 1234567890123", MALFORMED),
        ("Answer: 32/1", MALFORMED),
    ],
)
def test_verify_reasons(response, reason):
    p = make("(7 + 5) * 3 - 4")
    verdict = tasks.get("arithmetic").verify(p, response)
    assert verdict.reason == reason and verdict.reward == (1.0 if reason == CORRECT else 0.0)


def test_verify_detail_for_long_numbers():
    verdict = tasks.get("arithmetic").verify(make("1 + 2"), "Answer: " + "9" * 40)
    assert verdict.reason == MALFORMED and "digits" in verdict.detail


# ---- first_wrong_step ----------------------------------------------------------------------

P = make("(7 + 5) * 3 - 4")


def test_first_wrong_step_all_correct():
    check = first_wrong_step(P, P.solution)
    assert (check.index, check.char_span, check.num_steps, check.reason) == (None, None, 3, STEP_OK)
    swapped = "Let me compute.\n5 + 7 = 12\n3 * 12 = 36\n36 - 4 = 32\nAnswer: 32"
    assert first_wrong_step(P, swapped).reason == STEP_OK  # + and * commute; prose is ignored


def test_first_wrong_step_arithmetic_error_at_step_two():
    response = "7 + 5 = 12\n12 * 3 = 35\n35 - 4 = 31\nAnswer: 31"
    check = first_wrong_step(P, response)
    assert (check.index, check.reason, check.num_steps) == (1, STEP_ARITHMETIC, 3)
    assert check.char_span == (11, 22) and response[11:22] == "12 * 3 = 35"
    indented = "Steps:\n  7 + 5 = 12\n\t12 * 3 = 35  \nAnswer: 31"
    span = first_wrong_step(P, indented).char_span
    assert indented[span[0] : span[1]] == "12 * 3 = 35"


@pytest.mark.parametrize(
    "response, index, reason",
    [
        ("7 + 5 = 12\n5 * 3 = 15\nAnswer: 11", 1, STEP_INVALID),  # 5 was consumed by step 0
        ("7 + 6 = 13\nAnswer: 35", 0, STEP_INVALID),  # 6 is not an operand
        ("12 * 3 = 36\nAnswer: 32", 0, STEP_INVALID),  # 12 is not computed yet
        ("5 * 3 = 15\nAnswer: 11", 0, STEP_INVALID),  # not an operation of the expression
        ("7 + 5 = 12\n12 * 3 = 36\n4 - 36 = -32\nAnswer: -32", 2, STEP_INVALID),  # - not swapped
        ("7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\n32 + 0 = 32\nAnswer: 32", 3, STEP_INVALID),
        ("7 + 5 = twelve\nAnswer: 32", 0, STEP_UNPARSABLE),
        ("7 + 5 = 12\n12 × 3 = 36\nAnswer: 32", 1, STEP_UNPARSABLE),
        ("7 + 5 = ١٢\nAnswer: 32", 0, STEP_UNPARSABLE),
        ("7 + 5 = 1234567890123\nAnswer: 32", 0, STEP_UNPARSABLE),
        ("7 + 5 = 12\nAnswer: 32", 1, STEP_MISSING),
        ("7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\nAnswer: 33", 3, STEP_WRONG_FINAL),
        ("7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\nAnswer: 32\n1 + 1 = 3", None, STEP_OK),
    ],
)
def test_first_wrong_step_cases(response, index, reason):
    check = first_wrong_step(P, response)
    assert (check.index, check.reason) == (index, reason)


def test_first_wrong_step_end_spans():
    missing = "7 + 5 = 12\nAnswer: 32"
    assert first_wrong_step(P, missing).char_span == (11, 21)  # the answer line
    no_answer = "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\n"
    check = first_wrong_step(P, no_answer)
    assert check.reason == STEP_WRONG_FINAL and check.char_span == (len(no_answer),) * 2


def test_first_wrong_step_duplicate_values_are_tracked():
    p = make("2 * 3 * 4 + 2 * 3")
    a = "2 * 3 = 6\n6 * 4 = 24\n2 * 3 = 6\n24 + 6 = 30\nAnswer: 30"
    b = "2 * 3 = 6\n2 * 3 = 6\n6 * 4 = 24\n24 + 6 = 30\nAnswer: 30"
    assert first_wrong_step(p, a).reason == first_wrong_step(p, b).reason == STEP_OK
    assert (response_cue(p, a), response_cue(p, b)) == ("0,1,3,2", "0,3,1,2")
    reuse = make("2 * 3 + 4 * 5")
    assert first_wrong_step(reuse, "2 * 3 = 6\n2 * 3 = 6\nAnswer: 26").index == 1


def test_every_valid_order_accepted_with_distinct_cues():
    task = tasks.get("arithmetic", num_operands=5)
    for p in task.problems(40):
        tree = arithmetic.parse_expression(p.metadata["expression"])
        ops = arithmetic.operations(tree)
        cues = set()
        for perm in itertools.permutations(ops):
            seen = set()
            valid = True
            for n in perm:
                valid &= all(c.op is None or c.index in seen for c in (n.left, n.right))
                seen.add(n.index)
            lines = [f"{n.left.value} {n.op} {n.right.value} = {n.value}" for n in perm]
            response = "\n".join([*lines, f"Answer: {tree.value}"])
            assert (first_wrong_step(p, response).reason == STEP_OK) == valid
            if valid:
                cues.add(response_cue(p, response))
        assert len(cues) == p.metadata["num_orders"] and p.metadata["cue"] in cues


def test_response_cue_none_for_incomplete_or_wrong_traces():
    assert response_cue(P, "7 + 5 = 12\nAnswer: 32") is None
    assert response_cue(P, "7 + 5 = 13\n13 * 3 = 39\n39 - 4 = 35") is None
    assert response_cue(P, "") is None
    assert response_cue(P, "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32") == "0,1,2"  # answer not needed


def test_hint_is_reference_trace():
    task = tasks.get("arithmetic")
    p = task.problem(0)
    assert task.hint(p) == f"Reference solution:\n{p.solution}"


def test_token_span():
    text = "7 + 5 = 12\n12 * 3 = 35\nAnswer: 35"
    chars = [(i, i + 1) for i in range(len(text))]
    assert token_span((11, 22), chars) == (11, 22)
    # Word tokens with a leading BOS and a trailing EOS of zero width.
    words = [(0, 0), (0, 1), (1, 3), (3, 5), (5, 7), (7, 10), (10, 11), (11, 13), (13, 15)]
    words += [(15, 17), (17, 19), (19, 22), (22, 23), (23, 30), (30, 33), (33, 33)]
    assert token_span((11, 22), words) == (7, 12)
    assert token_span((12, 14), words) == (7, 9)  # partial overlaps count
    assert token_span((33, 33), words) == (len(words), len(words))  # nothing after the end
    assert token_span((11, 11), words) == (7, 7)


# ---- robustness ----------------------------------------------------------------------------

ADVERSARIAL = [
    "",
    "9**9**9**9",
    "10^100000",
    "9" * 100_000,
    "x" * 100_000,
    "(" * 50_000,
    ")" * 50_000 + "(",
    "(" * 1000 + "1" + ")" * 1000,
    "٣",
    "３２",
    "__import__('os').system('x')",
    "\x00" * 1000,
    "=" * 100_000,
    "1 + 1 = 2\n" * 20_000,
    "9" * 12 + " * " + "9" * 12 + " = " + "9" * 12,
    " = ".join(["1 + 1"] * 5000),
    "\\boxed{" * 20_000,
    "Answer:" * 20_000,
    "\n" * 100_000,
    "7 + 5 = 12\r\n" * 5000,
]
ADVERSARIAL += ["Answer: " + s for s in ADVERSARIAL]


def _check_bounded(task, problem, response):
    for fn in (
        lambda: task.verify(problem, response),
        lambda: first_wrong_step(problem, response),
        lambda: response_cue(problem, response),
    ):
        start = time.perf_counter()
        out = fn()
        assert time.perf_counter() - start < 0.1
        if isinstance(out, tasks.Verdict):
            assert out.reason in REASONS
        elif isinstance(out, arithmetic.StepCheck):
            assert out.reason in arithmetic.STEP_REASONS
            if out.char_span is not None:
                assert 0 <= out.char_span[0] <= out.char_span[1] <= len(response)


@pytest.mark.parametrize("response", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_strings(response):
    task = tasks.get("arithmetic", num_operands=12, max_operand=1)  # many equal values
    for p in (P, task.problem(0)):
        _check_bounded(task, p, response)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300) | st.text("0123456789+-*= \nAnswer:", max_size=300))
def test_fuzz_never_raises(response):
    _check_bounded(tasks.get("arithmetic"), P, response)
