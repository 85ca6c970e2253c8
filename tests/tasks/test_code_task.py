"""The `code` task: LiveCodeBench / MBPP / HumanEval+ style jsonl rows, verified in the sandbox.

The fixture rows are written here with the field names of those releases (not copied data).
"""

import json

import pytest

from rlvr_jax import tasks
from rlvr_jax.data.sources import metadata_json
from rlvr_jax.sandbox import SandboxUnavailable
from rlvr_jax.sandbox import jail as jail_lib
from rlvr_jax.tasks import CORRECT, MALFORMED, TIMEOUT, WRONG_ANSWER, Problem
from rlvr_jax.tasks import code as code_task

ALL_TEST = dict(split_fractions=(0, 0, 1))

LCB_STDIN = {
    "question_title": "Add",
    "question_content": "Read two integers A and B and print A+B.",
    "platform": "atcoder",
    "question_id": "abc000_a",
    "contest_id": "abc000",
    "contest_date": "2024-01-01T00:00:00",
    "starter_code": "",
    "difficulty": "easy",
    "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
    "private_test_cases": json.dumps(
        [
            {"input": "-5 5\n", "output": "0\n", "testtype": "stdin"},
            {"input": "100 23\n", "output": "123\n", "testtype": "stdin"},
        ]
    ),  # fmt: skip
    "metadata": "{}",
}
LCB_FUNCTIONAL = {
    "question_title": "Max pair",
    "question_content": "Return the largest sum of two elements of nums.",
    "platform": "leetcode",
    "question_id": "9999",
    "starter_code": "class Solution:\n    def maxPair(self, nums: List[int]) -> int:\n        ",
    "public_test_cases": json.dumps(
        [{"input": "[1, 5, 3]", "output": "8", "testtype": "functional"}]
    ),
    "private_test_cases": json.dumps(
        [{"input": "[-1, -2]", "output": "-3", "testtype": "functional"}]
    ),
    "metadata": json.dumps({"func_name": "maxPair"}),
}
MBPP = {
    "task_id": 11,
    "text": "Write a function to return the square of a number.",
    "code": "def square(x):\n    return x * x",
    "test_list": ["assert square(3) == 9", "assert square(-2) == 4"],
    "test_setup_code": "",
    "challenge_test_list": [],
}
HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": 'def inc(x: int) -> int:\n    """Return x + 1."""\n',
    "canonical_solution": "    return x + 1\n",
    "entry_point": "inc",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n",
}


def _file(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _answer(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nDone."


def test_registered_and_needs_a_path():
    assert "code" in tasks.names()
    with pytest.raises(ValueError, match="needs path="):
        tasks.get("code")
    with pytest.raises(ValueError, match="reward 'half' unknown"):
        tasks.get("code", path="x.jsonl", reward="half")


def test_livecodebench_rows_verify_through_the_sandbox(tmp_path):
    task = tasks.get("code", path=_file(tmp_path, [LCB_STDIN, LCB_FUNCTIONAL]), **ALL_TEST)
    assert task.num_problems("test") == 2
    add, pair = task.problem(0, "test"), task.problem(1, "test")
    assert len(add.metadata["tests"]) == 3 and "stdin" in add.prompt
    assert "class Solution" in pair.prompt and add.metadata["record"] == 1
    good = task.verify(add, _answer("a, b = map(int, input().split())\nprint(a + b)"))
    assert (good.reward, good.reason) == (1.0, CORRECT)
    # Right on positives only: passes 2 of 3 tests ("-5 5" gives 10).
    wrong = task.verify(add, _answer("a, b = map(int, input().split())\nprint(abs(a) + abs(b))"))
    assert (wrong.reward, wrong.reason) == (0.0, WRONG_ANSWER) and "2/3" in wrong.detail
    sol = "class Solution:\n    def maxPair(self, nums):\n        s = sorted(nums)\n"
    sol += "        return s[-1] + s[-2]"
    assert task.verify(pair, _answer(sol)).reason == CORRECT
    assert task.verify(pair, _answer(sol.replace("s[-2]", "0"))).reward == 0.0


def test_fraction_reward_timeout_and_malformed(tmp_path):
    path = _file(tmp_path, [LCB_STDIN])
    task = tasks.get("code", path=path, reward="fraction", wall_seconds=1.0, **ALL_TEST)
    add = task.problem(0, "test")
    wrong = task.verify(add, _answer("a, b = map(int, input().split())\nprint(abs(a) + abs(b))"))
    assert wrong.reward == pytest.approx(2 / 3) and wrong.reason == WRONG_ANSWER
    slow = task.verify(add, _answer("while True:\n    pass"))
    assert (slow.reward, slow.reason) == (0.0, TIMEOUT)
    assert task.verify(add, "print(3) with no code block").reason == MALFORMED
    assert task.verify(add, "```python\n\n```").reason == MALFORMED


def test_mbpp_and_humaneval_rows(tmp_path):
    task = tasks.get("code", path=_file(tmp_path, [MBPP, HUMANEVAL]), **ALL_TEST)
    square, inc = task.problem(0, "test"), task.problem(1, "test")
    assert "assert square(3) == 9" in square.prompt and len(square.metadata["tests"]) == 2
    assert task.verify(square, square.solution).reason == CORRECT  # the reference solution
    assert (
        task.verify(square, _answer("def square(x):\n    return x ** 2 if x > 0 else x")).reward
        == 0
    )
    assert task.verify(inc, inc.solution).reason == CORRECT
    assert task.verify(inc, _answer("def inc(x):\n    return x + 2")).reason == WRONG_ANSWER


def test_malformed_rows_name_file_line_and_field(tmp_path):
    no_tests = dict(MBPP, test_list=[])
    path = _file(tmp_path, [MBPP, no_tests, "{not json", LCB_STDIN])
    with pytest.raises(ValueError, match=r"data.jsonl, line 2: no tests: field 'test_list'"):
        tasks.get("code", path=path, **ALL_TEST).problem(0, "test")
    task = tasks.get("code", path=path, on_error="skip", **ALL_TEST)
    assert (task.num_problems("test"), task.num_skipped()) == (2, 2)
    compressed = dict(LCB_STDIN, private_test_cases="eJzLSM3JyVcozy/KSQEAGgQEXQ==")
    with pytest.raises(ValueError, match=r"line 1, field 'private_test_cases'.*pickle"):
        tasks.get("code", path=_file(tmp_path, [compressed], "c.jsonl"), **ALL_TEST).problem(
            0, "test"
        )
    no_func = dict(LCB_FUNCTIONAL, metadata="{}")
    with pytest.raises(ValueError, match=r"line 1, field 'public_test_cases'\[0\].*func_name"):
        tasks.get("code", path=_file(tmp_path, [no_func], "f.jsonl"), **ALL_TEST).problem(0, "test")


def test_refuses_to_start_without_isolation(tmp_path, monkeypatch):
    code_task._pool.cache_clear()
    monkeypatch.setattr(jail_lib, "_which", lambda name: None)
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            tasks.get("code", path=_file(tmp_path, [MBPP]), workers=3)
    finally:
        code_task._pool.cache_clear()


def test_problem_survives_the_data_pipelines_json(tmp_path):
    task = tasks.get("code", path=_file(tmp_path, [LCB_STDIN]), **ALL_TEST)
    p = task.problem(0, "test")
    back = Problem(p.id, p.prompt, p.answer, p.solution, json.loads(metadata_json(p.metadata)))
    second = {"stdin": "-5 5\n", "expected_stdout": "0\n", "assertion": None}
    assert back.metadata["tests"][1] == second
    assert task.verify(back, _answer("print(sum(map(int, input().split())))")).reason == CORRECT
