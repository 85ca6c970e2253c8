"""tool_lookup: generation, the multi-turn env, the bounded calculator, the verifier."""

import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import CORRECT, MALFORMED, REASONS, WRONG_ANSWER
from rlvr_jax.tasks.tools import calculate, format_number, parse_number, reference_turns

ADVERSARIAL = [
    "9**9**9**9",
    "10^100000",
    "1" * 100_000,
    "x" * 100_000,
    "(" * 100_000,
    "(" * 5000 + "1" + ")" * 5000,
    "((1+2",
    "1+2))",
    "٣",
    "３",
    "__import__('os').system('x')",
    "\x00" * 1000,
    "1/0",
    "",
    "<call>" * 10_000,
    "<call>calc(" + "(" * 19 + "1" + ")" * 19 + ")</call>",
    "<call>calc(" + "9" * 10_000 + ")</call>",
    "<call>calc(" + "*".join(["9" * 30] * 6) + ")</call>",
    "<call>lookup(" + "," * 5000 + ")</call>",
    "Answer: " + "9" * 100_000,
    "Answer:\n" * 10_000,
]
ADVERSARIAL += ["Answer: " + s for s in ADVERSARIAL]


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.1, f"{elapsed * 1000:.1f} ms"
    return out


def _run(task, problem, turns):
    env = task.env(problem)
    results = [env.step(t) for t in turns]
    return env, results


# ------------------------------------------------------------------ generation
def test_registry_and_determinism():
    task = tasks.get("tool_lookup", seed=3)
    assert task.problem(5, "train") == tasks.get("tool_lookup", seed=3).problem(5, "train")
    assert task.problem(5, "train") != task.problem(5, "test")
    assert task.problem(5, "train") != tasks.get("tool_lookup", seed=4).problem(5, "train")
    train = {p.prompt for p in task.problems(200, "train")}
    test = {p.prompt for p in task.problems(200, "test")}
    assert not train & test
    with pytest.raises(ValueError, match="valid"):
        tasks.get("tool_lookup", lookups=2)


@pytest.mark.parametrize("bad", [{"num_lookups": 4}, {"num_entities": 1}, {"max_turns": 2}])
def test_options_are_validated(bad):
    with pytest.raises(ValueError):
        tasks.get("tool_lookup", **{"num_lookups": 2, **bad})


def test_difficulty_knobs():
    for k in (1, 2, 3):
        for p in tasks.get("tool_lookup", num_lookups=k).problems(20):
            assert len(p.metadata["lookups"]) == k
            assert p.solution.count("<call>lookup(") == k
            assert len({e for e, _ in p.metadata["lookups"]}) == k
    for n in (2, 12):
        p = tasks.get("tool_lookup", num_entities=n).problem(0)
        assert len(p.metadata["facts"]) == n
        assert len(p.metadata["fact_lines"]) == 3 * n


def test_name_length_and_preamble_options():
    # Late options at their defaults leave the problems as they were before the options
    # existed (this prompt is the one docs/base_models.md recorded for the first spec).
    old = tasks.get("tool_lookup", num_lookups=1).problem(0)
    assert "What is the population of Fanugin times 12?" in old.prompt
    same = tasks.get("tool_lookup", num_lookups=1, max_name_syllables=3, instructions=True)
    assert same.problem(0) == old
    short = tasks.get("tool_lookup", num_lookups=1, max_name_syllables=1, instructions=False)
    for p in short.problems(30):
        assert p.prompt.startswith("Question: ") and "<call>" not in p.prompt
        # One consonant-vowel syllable (onsets of <= 2 letters) plus an optional coda.
        assert all(len(name) <= 5 for name in p.metadata["facts"])
        for turn in reference_turns(p):  # the episode still solves with the short names
            assert "<call>lookup(" not in turn or turn.split("(")[1].split(",")[0] in p.prompt
    with pytest.raises(ValueError, match="max_name_syllables"):
        tasks.get("tool_lookup", max_name_syllables=5)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_reference_solutions_verify_and_drive_the_env(k):
    task = tasks.get("tool_lookup", num_lookups=k)
    for p in task.problems(150, "validation"):
        assert task.verify(p, p.solution).reason == CORRECT
        env, results = _run(task, p, reference_turns(p))
        assert [r.done for r in results] == [False] * (k + 1) + [True]
        assert results[-1].reward == 1.0 and results[-1].info["reason"] == CORRECT
        transcript = "".join(
            t + (r.observation or "") for t, r in zip(reference_turns(p), results, strict=True)
        )
        assert transcript == p.solution
        # The answer is the question's arithmetic over the looked-up facts.
        facts = p.metadata["facts"]
        values = [str(facts[e][a]) for e, a in p.metadata["lookups"]]
        assert p.metadata["expression"].split(" ")[::2][:k] == values
        assert calculate(p.metadata["expression"]).value == Fraction(p.answer)


def test_hand_problem_literal():
    task = tasks.get("tool_lookup", num_lookups=2, seed=0)
    p = task.problem(0)
    (e1, a1), (e2, a2) = p.metadata["lookups"]
    v1, v2 = p.metadata["facts"][e1][a1], p.metadata["facts"][e2][a2]
    op = p.metadata["expression"].split(" ")[1]
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    assert f"What is the {a1} of {e1} {word} the {a2} of {e2}?" in p.prompt
    expected = {"+": v1 + v2, "-": v1 - v2, "*": v1 * v2}[op]
    assert p.answer == str(expected)
    env = task.env(p)
    assert (
        env.step(f"<call>lookup({e1.upper()},  {a1})</call>").observation
        == f"\n<result>{v1}</result>\n"
    )


# ------------------------------------------------------------------------- env
@pytest.fixture
def task_problem():
    task = tasks.get("tool_lookup", num_lookups=2)
    return task, task.problem(7)


def test_wrong_and_malformed_final_answers(task_problem):
    task, p = task_problem
    wrong = str(int(p.answer) + 1)
    env, [r] = _run(task, p, [f"Answer: {wrong}\n"])
    assert r.done and r.reward == 0.0 and r.info["reason"] == WRONG_ANSWER
    assert task.verify(p, f"blah\nAnswer: {wrong}").reason == WRONG_ANSWER
    assert task.verify(p, f"Answer: {p.answer}.0").reason == CORRECT
    assert task.verify(p, "no answer here").reason == MALFORMED
    assert task.verify(p, "Answer: forty").reason == MALFORMED
    env, [r] = _run(task, p, ["Answer: forty"])
    assert r.done and r.reward == 0.0 and r.info["reason"] == MALFORMED


@pytest.mark.parametrize(
    "turn,detail",
    [
        ("<call>lookup(Nowhere, population)</call>", "unknown entity"),
        ("<call>search(x)</call>", "unknown tool"),
        ("<call>lookup(a)</call>", "lookup takes"),
        ("<call>calc(1/0)</call>", "division by zero"),
        ("<call>calc(2**3)</call>", "expected a number"),
        ("<call>lookup Varno</call>", "malformed call"),
        ("I call <call>calc(1+1)</call> inline", "malformed call"),
        ("<call>calc(1+1)", "malformed call"),
        ("just thinking", "no call or answer"),
    ],
)
def test_bad_calls_give_error_observations(task_problem, turn, detail):
    task, p = task_problem
    env = task.env(p)
    r = env.step(turn + "\n")
    assert not r.done and r.reward is None and r.info["reason"] == "error"
    assert r.observation.startswith("<error>") and detail in r.observation
    # The episode continues: the reference still earns the reward afterwards.
    results = [env.step(t) for t in reference_turns(p)[: env.max_turns - 1]]
    assert results[-1].done is False
    final = env.step(f"Answer: {p.answer}")
    assert final.done and final.reward == 1.0


def test_last_call_in_turn_counts_and_answer_ends(task_problem):
    task, p = task_problem
    env = task.env(p)
    r = env.step("<call>calc(1+1)</call>\nthen\n<call>calc(2*(3+4))</call>\n")
    assert r.observation == "<result>14</result>\n" and r.info["tool"] == "calc"
    r = env.step(f"<call>calc(1+1)</call>\nAnswer: {p.answer}\n")
    assert r.done and r.reward == 1.0
    again = env.step("<call>calc(1+1)</call>")
    assert again.done and again.observation is None and again.reward == 1.0


def test_max_turns_exceeded_ends_with_zero(task_problem):
    task, p = task_problem
    env = task.env(p)
    results = [env.step("<call>calc(1+1)</call>\n") for _ in range(task.max_turns)]
    assert not any(r.done for r in results)
    r = env.step("<call>calc(1+1)</call>\n")
    assert r.done and r.reward == 0.0 and r.info["reason"] == MALFORMED and r.observation is None
    assert env.done and env.step(f"Answer: {p.answer}").reward == 0.0


# ------------------------------------------------------------------ calculator
@pytest.mark.parametrize(
    "expr,value",
    [
        ("412 + 77", 489),
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("2*(3+4)", 14),
        ("-3 - -2", -1),
        ("10 - 4 - 3", 3),
        ("24 / 4 / 3", 2),
        ("1/3 + 1/6", Fraction(1, 2)),
        ("1.5 * 4", 6),
        ("  7 / 2 ", Fraction(7, 2)),
        ("+(5)", 5),
    ],
)
def test_calc_hand_cases(expr, value):
    assert calculate(expr) == (Fraction(value), None)


@pytest.mark.parametrize(
    "expr,error",
    [
        ("1/0", "division by zero"),
        ("1/(2-2)", "division by zero"),
        ("(1+2", "unbalanced"),
        ("1+2)", "unexpected"),
        ("1+", "expected a number"),
        ("", "expected a number"),
        ("9**9**9**9", "expected a number"),
        ("10^100000", "unexpected character"),
        ("1e5", "unexpected character"),
        ("٣+1", "unexpected character"),
        ("３", "unexpected character"),
        ("__import__('os')", "unexpected character"),
        ("1" * 31, "number too long"),
        ("(" * 30 + "1" + ")" * 30, "nested too deeply"),
        ("-" * 50 + "1", "nested too deeply"),
        ("*".join(["9" * 30] * 3), "number too large"),
        ("1" * 201, "expression too long"),
    ],
)
def test_calc_errors(expr, error):
    value, message = _timed(calculate, expr)
    assert value is None and error in message


def test_format_and_parse_number():
    cases = {
        Fraction(5): "5",
        Fraction(-5, 2): "-2.5",
        Fraction(-3, 40): "-0.075",
        Fraction(1, 3): "1/3",
        Fraction(-1, 8): "-0.125",
    }
    for value, text in cases.items():
        assert format_number(value) == text
        assert parse_number(text) == value
    assert parse_number("1,234") == 1234 and parse_number("489.") == 489
    for bad in ["1,23", "٣", "１", "1e3", "1/0", "2+2", "", "9" * 41]:
        assert parse_number(bad) is None


# ------------------------------------------------------------------ robustness
@pytest.mark.parametrize("text", ADVERSARIAL)
def test_adversarial_strings(task_problem, text):
    task, p = task_problem
    assert _timed(task.verify, p, text).reason in REASONS
    r = _timed(task.env(p).step, text)
    assert r.done or r.observation.startswith(("<", "\n<"))
    if r.done:
        assert r.info["reason"] in REASONS
    value, error = _timed(calculate, text)
    assert (value is None) != (error is None)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_text(text):
    task = tasks.get("tool_lookup")
    p = task.problem(1)
    assert _timed(task.verify, p, text).reason in REASONS
    assert _timed(task.verify, p, "Answer: " + text).reason in REASONS
    env = task.env(p)
    for turn in (text, "<call>calc(" + text + ")</call>", "<call>lookup(" + text + ")</call>"):
        r = _timed(env.step, turn)
        assert r.done or (r.observation and r.reward is None)
    value, error = _timed(calculate, text)
    assert (value is None) != (error is None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.+-*/() ", max_size=200))
def test_fuzz_calc_grammar(expr):
    value, error = _timed(calculate, expr)
    assert (value is None) != (error is None)
    if value is not None:
        assert parse_number(format_number(value)) == value
