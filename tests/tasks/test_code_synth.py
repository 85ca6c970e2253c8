"""The synthetic code task: deterministic problems, hand-checked tests, sandboxed verdicts,
and batch verification equal to one-by-one verification."""

import pytest

from rlvr_jax import tasks
from rlvr_jax.data.vocab import default_tokenizer
from rlvr_jax.sandbox import SandboxUnavailable
from rlvr_jax.sandbox import jail as jail_lib
from rlvr_jax.tasks import CORRECT, MALFORMED, TIMEOUT, WRONG_ANSWER
from rlvr_jax.tasks import code as code_task

FAST = dict(wall_seconds=1.0, cpu_seconds=1.0)


def _answer(program: str) -> str:
    return f"Here it is.\n```python\n{program}\n```"


def _first(task, form: str, split: str = "train"):
    return next(p for p in task.problems(60, split) if p.metadata["form"] == form)


def test_problems_are_deterministic_and_checked_by_hand():
    task = tasks.get("code_synth")
    assert task.problem(5) == tasks.get("code_synth").problem(5)
    assert task.problem(5) != task.problem(5, "test")
    assert task.problem(5) != tasks.get("code_synth", seed=1).problem(5)
    # Verifier options leave the problems alone.
    assert tasks.get("code_synth", reward="fraction", workers=1).problem(5) == task.problem(5)
    for form in ("linear", "conditional", "mod"):
        p = _first(task, form)
        a, b, c = p.metadata["constants"]
        xs, vs = p.metadata["inputs"], p.metadata["outputs"]
        assert len(set(xs)) == len(xs) == 4 and all(0 <= x < 20 for x in xs)
        for x, v in zip(xs, vs, strict=True):
            if form == "linear":
                assert v in (a * x + b, a * x - b)
            elif form == "conditional":
                assert v == (x + a if x > b else x * c)
            else:
                assert v == (x * a) % b
        if form == "conditional":  # both branches are tested
            assert min(xs) <= b < max(xs)
        assert p.prompt.startswith("Write a Python function f(x) that returns ")
        assert f" {a}" in p.prompt and "Example" not in p.prompt  # no test value shown
        assert p.solution.startswith("```python\ndef f(x):\n") and p.answer in p.solution


def test_reference_solutions_fit_64_tokens_of_the_shipped_tokenizer():
    tok = default_tokenizer()
    task = tasks.get("code_synth")
    lengths = [len(tok.encode(p.solution)) + 1 for p in task.problems(200)]  # + <|im_end|>
    assert max(lengths) <= 64


def test_verdicts_through_the_sandbox():
    task = tasks.get("code_synth", **FAST)
    p = _first(task, "conditional")
    a, b, c = p.metadata["constants"]
    assert task.verify(p, p.solution).reason == CORRECT
    # Right above the threshold only: the "else" branch is wrong.
    half = f"def f(x):\n    return x + {a}"
    wrong = task.verify(p, _answer(half))
    assert (wrong.reward, wrong.reason) == (0.0, WRONG_ANSWER)
    frac = tasks.get("code_synth", reward="fraction", **FAST)
    expected = sum(x > b or x + a == x * c for x in p.metadata["inputs"]) / 4
    assert frac.verify(p, _answer(half)).reward == pytest.approx(expected)
    assert 0 < expected < 1
    assert task.verify(p, "def f(x): return 1").reason == MALFORMED
    assert task.verify(p, _answer("def f(x):\n    while True:\n        pass")).reason == TIMEOUT


def test_early_exit_and_extra_output_do_not_pass():
    task = tasks.get("code_synth", **FAST)
    p = task.problem(0)
    program = p.answer
    assert task.verify(p, _answer("import sys\nsys.exit(0)")).reason == WRONG_ANSWER
    assert task.verify(p, _answer(f"{program}\nraise SystemExit")).reason == WRONG_ANSWER
    assert task.verify(p, _answer(f"{program}\nprint('hi')")).reason == WRONG_ANSWER
    # The sentinel is per problem (and never in a prompt): another problem's does not pass.
    other = task.problem(1).metadata["sentinel"]
    assert other != p.metadata["sentinel"]
    assert task.verify(p, _answer(f"print({other!r})\nexit()")).reward == 0


def test_batch_verdicts_equal_one_by_one_verdicts():
    # "fraction" with 2 tests: each test of the looping program waits out the wall limit.
    for reward, num_tests in (("all", 4), ("fraction", 2)):
        task = tasks.get("code_synth", reward=reward, num_tests=num_tests, **FAST)
        problems = task.problems(6)
        responses = [
            problems[0].solution,  # right
            _answer("def f(x):\n    return x"),  # wrong
            _answer("def f(x):\n    while True:\n        pass"),  # timeout
            "no code here",  # malformed
            _answer("def f(x) return"),  # syntax error
            problems[5].solution,
        ]
        batch = task.verify_batch(problems, responses)
        single = [task.verify(p, r) for p, r in zip(problems, responses, strict=True)]
        # The detail has the per-test statuses, but not their timings: equal as dataclasses.
        assert batch == single
        assert [v.reason for v in batch] == [
            CORRECT, WRONG_ANSWER, TIMEOUT, MALFORMED, WRONG_ANSWER, CORRECT
        ]  # fmt: skip


def test_one_sandbox_call_per_batch(monkeypatch):
    task = tasks.get("code_synth", **FAST)
    pool, calls = task.pool(), []
    run = pool.run
    monkeypatch.setattr(pool, "run", lambda jobs: calls.append(len(jobs)) or run(jobs))
    problems = task.problems(4)
    responses = [p.solution for p in problems[:3]] + ["no block"]
    verdicts = task.verify_batch(problems, responses)
    assert calls == [3] and [v.reward for v in verdicts] == [1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="3 test lists for 4 responses"):
        task.verify_batch(problems[:3], responses)


def test_bad_options_and_refusal_without_isolation(monkeypatch):
    with pytest.raises(ValueError, match="forms 'linear,cubic' has \\['cubic'\\]"):
        tasks.get("code_synth", forms="linear,cubic")
    with pytest.raises(ValueError, match="reward 'half' unknown"):
        tasks.get("code_synth", reward="half")
    with pytest.raises(ValueError, match="num_tests must be in 2..10"):
        tasks.get("code_synth", num_tests=11)
    code_task._pool.cache_clear()
    monkeypatch.setattr(jail_lib, "_which", lambda name: None)
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            tasks.get("code_synth", workers=3)
    finally:
        code_task._pool.cache_clear()


def test_default_verify_batch_loops_over_verify():
    task = tasks.get("arithmetic")
    problems = task.problems(3)
    responses = [problems[0].solution, "Answer: -99999", "nothing"]
    assert task.verify_batch(problems, responses) == [
        task.verify(p, r) for p, r in zip(problems, responses, strict=True)
    ]
    assert [v.reason for v in task.verify_batch(problems, responses)] == [
        CORRECT, WRONG_ANSWER, MALFORMED
    ]  # fmt: skip
