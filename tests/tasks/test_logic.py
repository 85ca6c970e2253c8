"""Tests of the knights-and-knaves task: solver, generator, rendering, verifier."""

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import CORRECT, MALFORMED, REASONS, WRONG_ANSWER, Problem
from rlvr_jax.tasks.logic import evaluate, render_statement, solve

T, F = True, False


def _is(person, role):
    return ("is", person, role)


# ---------------------------------------------------------------- hand puzzles


def test_solve_classic_we_are_both_knaves():
    # A says "we are both knaves": a knight cannot say it, so A is a knave and
    # the statement is false, hence B is a knight.
    both_knaves = ("and", _is(0, "knave"), _is(1, "knave"))
    assert solve([both_knaves, None], 2) == [(F, T)]


def test_solve_hand_puzzles():
    # A: "at least one of us is a knave" -> A knight, B knave.
    assert solve([("or", _is(0, "knave"), _is(1, "knave")), None], 2) == [(T, F)]
    # A: "B is a knave"; B: "we are the same kind" -> A knight, B knave.
    same = ("iff", _is(0, "knight"), _is(1, "knight"))
    assert solve([_is(1, "knave"), same], 2) == [(T, F)]
    # The liar paradox has no solution; "I am a knight" has two.
    assert solve([_is(0, "knave")], 1) == []
    assert solve([_is(0, "knight")], 1) == [(T,), (F,)]
    # Atoms only never pin down a unique answer: flipping everyone keeps consistency.
    assert len(solve([_is(1, "knave"), _is(0, "knave")], 2)) == 2
    with pytest.raises(ValueError):
        solve([None], 2)


def test_evaluate_connectives():
    a, b = _is(0, "knight"), _is(1, "knight")
    truth = {
        "and": [T, F, F, F],
        "or": [T, T, T, F],
        "if": [T, F, T, T],  # false antecedent makes "if" true
        "iff": [T, F, F, T],
    }
    cases = [(T, T), (T, F), (F, T), (F, F)]
    for op, expected in truth.items():
        assert [evaluate((op, a, b), x) for x in cases] == expected, op
    assert [evaluate(("not", a), x) for x in cases] == [F, F, T, T]
    assert evaluate(_is(1, "knave"), (T, F))


# ------------------------------------------------------------------- rendering


def test_render_literal_cases():
    names = ("Ann", "Bob", "Cal")
    stmt = ("and", _is(1, "knave"), _is(2, "knight"))
    assert render_statement(stmt, names, 0) == "Ann says: Bob is a knave and Cal is a knight."
    nested = ("if", _is(0, "knight"), ("or", _is(1, "knave"), ("not", _is(2, "knight"))))
    assert (
        render_statement(nested, names, 0)
        == "Ann says: If I am a knight then (Bob is a knave or Cal is not a knight)."
    )
    neg = ("not", ("iff", _is(2, "knave"), _is(0, "knight")))
    assert (
        render_statement(neg, names, 2)
        == "Cal says: It is not true that (I am a knave if and only if Ann is a knight)."
    )


# An independent reader of the rendered English: parses a statement back into a
# predicate over assignments, so uniqueness is checked on what the model sees.
_LIT = re.compile(r"([a-z]+) (?:is|am) (not )?a (knight|knave)")
_FORMS = (
    (re.compile(r"it is not true that (\S+)"), lambda x: lambda a: not x(a)),
    (re.compile(r"(\S+) if and only if (\S+)"), lambda x, y: lambda a: x(a) == y(a)),
    (re.compile(r"if (\S+) then (\S+)"), lambda x, y: lambda a: (not x(a)) or y(a)),
    (re.compile(r"(\S+) and (\S+)"), lambda x, y: lambda a: x(a) and y(a)),
    (re.compile(r"(\S+) or (\S+)"), lambda x, y: lambda a: x(a) or y(a)),
)


def _read(text, names, speaker):
    """Predicate of a rendered statement (lower case, no final period)."""
    groups, skeleton, depth, start = [], "", 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            start = i if depth == 0 else start
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                groups.append(text[start + 1 : i])
                skeleton += f"#{len(groups) - 1}"
        elif depth == 0:
            skeleton += ch
    assert depth == 0, text
    # Literals become single tokens so the forms below see one connective.
    literals = []

    def _lit(m):
        who = speaker if m[1] == "i" else names.index(m[1])
        literals.append((who, (m[3] == "knight") != bool(m[2])))
        return f"@{len(literals) - 1}"

    skeleton = _LIT.sub(_lit, skeleton).strip()

    def unit(tok):
        if tok.startswith("#"):
            return _read(groups[int(tok[1:])], names, speaker)
        who, knight = literals[int(tok[1:])]
        return lambda a: a[who] == knight

    if re.fullmatch(r"@\d+", skeleton):
        return unit(skeleton)
    for form, build in _FORMS:
        m = form.fullmatch(skeleton)
        if m:
            return build(*(unit(g) for g in m.groups()))
    raise AssertionError(f"unparsable statement {text!r}")


def _resolve_from_prompt(problem):
    lines = problem.prompt.lower().splitlines()[1:-1]
    names = [p.lower() for p in problem.metadata["people"]]
    preds = []
    for i, line in enumerate(lines):
        head = f"{names[i]} says: "
        assert line.startswith(head) and line.endswith("."), line
        preds.append(_read(line[len(head) : -1], names, i))
    n = len(names)
    return [
        a
        for a in itertools.product((True, False), repeat=n)
        if all(preds[i](a) == a[i] for i in range(n))
    ]


@pytest.mark.parametrize("num_people", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_generated_puzzles_unique_by_independent_resolve(num_people, max_depth):
    task = tasks.get("knights_knaves", num_people=num_people, max_depth=max_depth, seed=3)
    for problem in task.problems(12):
        (only,) = _resolve_from_prompt(problem)
        roles = tuple("knight" if k else "knave" for k in only)
        assert roles == problem.metadata["assignment"]
        people = problem.metadata["people"]
        assert problem.answer == ", ".join(f"{p}={r}" for p, r in zip(people, roles, strict=True))
        # The stored trees agree with the text on every assignment.
        trees, names = problem.metadata["trees"], [p.lower() for p in people]
        lines = problem.prompt.lower().splitlines()[1:-1]
        for i, tree in enumerate(trees):
            pred = _read(lines[i][len(names[i]) + len(" says: ") : -1], names, i)
            for a in itertools.product((True, False), repeat=num_people):
                assert pred(a) == evaluate(tree, a)


def test_rendering_and_problems_are_deterministic():
    a = tasks.get("knights_knaves", num_people=4, seed=7)
    b = tasks.get("knights_knaves", num_people=4, seed=7)
    for i in range(20):
        assert a.problem(i, "test") == b.problem(i, "test")
    p = a.problem(0)
    assert p.metadata["statements"] == tuple(
        render_statement(t, p.metadata["people"], i) for i, t in enumerate(p.metadata["trees"])
    )
    assert a.problem(0, "train").prompt != a.problem(0, "test").prompt
    other = tasks.get("knights_knaves", num_people=4, seed=8)
    assert sum(a.problem(i).prompt == other.problem(i).prompt for i in range(20)) == 0


def test_no_train_test_overlap():
    task = tasks.get("knights_knaves")
    train = {p.prompt for p in task.problems(150, "train")}
    test = {p.prompt for p in task.problems(150, "test")}
    assert not train & test


def test_difficulty_knobs():
    def stats(**kw):
        ps = tasks.get("knights_knaves", **kw).problems(60)
        return ps, sum(p.metadata["connectives"] for p in ps) / len(ps)

    shallow, c1 = stats(num_people=4, max_depth=1)
    deep, c3 = stats(num_people=4, max_depth=3)
    assert all(p.metadata["depth"] <= 1 for p in shallow)
    assert all(p.metadata["depth"] <= 3 for p in deep)
    assert max(p.metadata["depth"] for p in deep) == 3
    assert c3 > 2 * c1
    for n in (2, 6):
        p = tasks.get("knights_knaves", num_people=n).problem(0)
        assert len(p.metadata["people"]) == len(p.metadata["statements"]) == n
        assert len(set(p.metadata["people"])) == n
        assert p.metadata["resamples"] >= 0


def test_options_are_validated():
    for bad in (
        {"num_people": 1},
        {"num_people": 7},
        {"num_people": 3.0},
        {"max_depth": 0},
        {"max_depth": 5},
        {"names": ("Ann", "ann", "Bob")},
        {"names": ("Ann", "Bob")},
        {"names": ("Ann", "Bob", "B0b")},
        {"names": ("Ann", "Bob", "I")},
        {"names": ("Ann", "Bob", "Knave")},
    ):
        with pytest.raises(ValueError):
            tasks.get("knights_knaves", **bad)
    with pytest.raises(ValueError, match="valid"):
        tasks.get("knights_knaves", people=3)
    p = tasks.get("knights_knaves", names=("Xu", "Yo"), num_people=2).problem(0)
    assert set(p.metadata["people"]) == {"Xu", "Yo"}


# -------------------------------------------------------------------- verifier


@pytest.mark.parametrize("num_people", [2, 3, 4, 5])
def test_reference_solutions_verify_correct(num_people):
    task = tasks.get("knights_knaves", num_people=num_people, max_depth=2, seed=11)
    for problem in task.problems(100):
        verdict = task.verify(problem, problem.solution)
        assert verdict.reason == CORRECT, (problem.prompt, verdict)
        assert verdict.reward == 1.0 and verdict.parsed == problem.answer
        assert task.partial_score(problem, problem.solution) == 1.0


HAND = Problem(
    id="hand",
    prompt="",
    answer="Ann=knave, Bob=knight, Cal=knight",
    solution="",
    metadata={"people": ("Ann", "Bob", "Cal"), "assignment": ("knave", "knight", "knight")},
)


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("Answer: Ann=knave, Bob=knight, Cal=knight", CORRECT),
        ("so...\nAnswer: Cal=knight, Ann=knave, Bob=knight", CORRECT),
        ("Answer: cal=KNIGHT; ANN = Knave;bob=knight.", CORRECT),
        ("Answer: Ann=knave, Bob=knight, Cal=knight,", CORRECT),
        ("Answer: Ann=knight, Bob=knight, Cal=knight", WRONG_ANSWER),
        ("Answer: Ann=knave, Bob=knave, Cal=knave", WRONG_ANSWER),
        ("Answer: Ann=knave, Bob=knight", MALFORMED),  # Cal missing
        ("Answer: Ann=knave, Bob=knight, Cal=knight, Ann=knave", MALFORMED),  # duplicate
        ("Answer: Ann=knave, Bob=knight, Dan=knight", MALFORMED),  # unknown name
        ("Answer: Ann=knave, Bob=knight, Cal=liar", MALFORMED),
        ("Answer: Ann=knight/knave, Bob=knight/knave, Cal=knight/knave", MALFORMED),
        ("Answer: Ann is a knave, Bob=knight, Cal=knight", MALFORMED),
        ("Ann=knave, Bob=knight, Cal=knight", MALFORMED),  # no Answer line
        ("", MALFORMED),
    ],
)
def test_verify_hand_responses(response, reason):
    task = tasks.get("knights_knaves")
    verdict = task.verify(HAND, response)
    assert verdict.reason == reason, verdict
    assert verdict.reward == (1.0 if reason == CORRECT else 0.0)


def test_partial_score():
    task = tasks.get("knights_knaves")
    assert task.partial_score(HAND, "Answer: Ann=knave, Bob=knight, Cal=knight") == 1.0
    assert task.partial_score(HAND, "Answer: Ann=knight, Bob=knight, Cal=knave") == pytest.approx(
        1 / 3
    )
    assert task.partial_score(HAND, "Answer: Bob=knight, Cal=knight") == pytest.approx(2 / 3)
    # Hedging a person earns nothing for that person.
    assert task.partial_score(
        HAND, "Answer: Ann=knave, Ann=knight, Bob=knight, Cal=knave"
    ) == pytest.approx(1 / 3)
    assert task.partial_score(HAND, "no answer") == 0.0


# ------------------------------------------------------------------ robustness

ADVERSARIAL = [
    "9**9**9**9",
    "10^100000",
    "1" * 100_000,
    "x" * 100_000,
    "(" * 50_000,
    ")" * 50_000 + "(",
    "(" * 5000 + "Ann=knight" + ")" * 5000,
    "٣",
    "３",
    "Ａnn=ｋnight",
    "__import__('os').system('x')",
    "\x00" * 10_000,
    "Ann=\x00knight, Bob=knave",
    "\\boxed{" * 20_000,
    "Answer:" * 20_000,
    "Ann=knight, " * 20_000,
    ";" * 100_000,
    "=" * 100_000,
    "Answer: Ann=knave\n" * 10_000,
    "İnn=knight, ǅob=knave",
]


def _check_robust(task, problem, response):
    start = time.perf_counter()
    verdict = task.verify(problem, response)
    score = task.partial_score(problem, response)
    elapsed = time.perf_counter() - start
    assert verdict.reason in REASONS
    assert 0.0 <= score <= 1.0
    assert elapsed < 0.1, (elapsed, response[:80])


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_adversarial_strings(text):
    task = tasks.get("knights_knaves", num_people=5)
    problem = task.problem(0)
    for response in (text, "Answer: " + text, problem.solution + text):
        _check_robust(task, problem, response)


_TASK = tasks.get("knights_knaves")
_PROBLEM = _TASK.problem(0)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_fuzz_verify_never_raises(text):
    _check_robust(_TASK, _PROBLEM, text)
    _check_robust(_TASK, _PROBLEM, "Answer: " + text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([*_PROBLEM.metadata["people"], "Zed", "ann", ""]),
            st.sampled_from(["knight", "knave", "KNAVE", "liar", ""]),
            st.sampled_from([", ", ";", " ; ", ","]),
        ),
        max_size=8,
    )
)
def test_fuzz_answer_items(items):
    response = "Answer: " + "".join(f"{n}={r}{sep}" for n, r, sep in items)
    _check_robust(_TASK, _PROBLEM, response)
