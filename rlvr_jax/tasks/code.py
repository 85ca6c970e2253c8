"""Coding problems with tests from a user-given jsonl, verified in the code sandbox.

Formats (`format="auto"` picks by the record's fields):
- "livecodebench": LiveCodeBench's code_generation_lite rows: `question_content`,
  `starter_code`, `public_test_cases` and `private_test_cases` (a JSON list, or a
  JSON string of one, of {"input", "output", "testtype"}). A "stdin" test feeds
  `input` and compares stdout with `output`. A "functional" test calls
  `Solution().<metadata.func_name>` on the input's JSON lines and compares the
  result with the output's JSON value. Private tests in LiveCodeBench's compressed
  form (base64 of zlib of a pickle) are refused: unpickling runs code on the host,
  so decompress them to JSON first.
- "mbpp": MBPP/MBPP+ and HumanEval+ style rows: `text` or `prompt`, `test_list` (one
  assert statement per test, after `test_setup_code` if any), or `test` (one test:
  the test code, then `check(<entry_point>)` when it defines `check`).

The response's last ```python (or bare ```) block is the program. `verify` runs it on
every test through a `SandboxPool`; reward 1 when all tests pass (`reward="all"`) or
the fraction passed (`reward="fraction"`). Building the task checks that the sandbox
can isolate programs: without it the task refuses to start (SandboxUnavailable
saying what is missing), and never runs model code unsandboxed. A verify call
takes as long as the program's tests (30-55 ms per test on 2 shared cores, more for
slow programs, up to `wall_seconds` each), not the ~100 ms of the synthetic tasks.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from rlvr_jax.sandbox import CodeJob, Limits, SandboxPool, TestCase
from rlvr_jax.tasks import (
    CORRECT,
    MALFORMED,
    TIMEOUT,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    register,
)
from rlvr_jax.tasks.base import MAX_RESPONSE_CHARS
from rlvr_jax.tasks.file_splits import FileSplits, check_fractions, hashed_splits
from rlvr_jax.tasks.jsonl import BadLine, parse_line

FORMATS = ("auto", "livecodebench", "mbpp")
REWARDS = ("all", "fraction")
INSTRUCTION = "\n\nWrite a complete Python 3 solution. Put the code in one ```python code block."
STDIN_INSTRUCTION = " The program reads the input from stdin and prints the answer to stdout."
# A response's program: the last fenced block (```python or a bare ```), up to 64 KiB.
_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_PROGRAM_CHARS = 1 << 16


@register
@dataclasses.dataclass(frozen=True)
class CodeTask(FileSplits, Task):
    """Programming problems with tests, read from a jsonl file.

    Attributes:
      path: the .jsonl file (required).
      format: "auto", "livecodebench" or "mbpp" (module docstring).
      reward: "all" (1 if every test passes) or "fraction" (share of tests passed).
      split_fractions: (train, validation, test) shares by sha256(seed | record id);
        (0, 0, 1) makes the whole file the test split.
      on_error: "raise" on a malformed record, or "skip" it (counted by num_skipped()).
      workers: concurrent sandboxes of one verify call.
      cpu_seconds, wall_seconds, memory_mb: each test run's limits.
    """

    name: ClassVar[str] = "code"
    path: str = ""
    format: str = "auto"
    reward: str = "all"
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    on_error: str = "raise"
    workers: int = 2
    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 512

    def __post_init__(self):
        if not self.path:
            raise ValueError("task 'code' needs path= a LiveCodeBench/MBPP-style .jsonl file")
        for field, value, valid in (("format", self.format, FORMATS),
                                    ("reward", self.reward, REWARDS),
                                    ("on_error", self.on_error, ("raise", "skip"))):  # fmt: skip
            if value not in valid:
                raise ValueError(f"task 'code': {field} {value!r} unknown; valid: {valid}")
        object.__setattr__(self, "split_fractions", check_fractions(self.split_fractions))
        self.pool()  # refuses to start (SandboxUnavailable) when programs cannot be isolated

    def limits(self) -> Limits:
        return Limits(cpu_seconds=self.cpu_seconds, wall_seconds=self.wall_seconds,
                      memory_mb=self.memory_mb)  # fmt: skip

    def pool(self) -> SandboxPool:
        """The shared pool for these limits (built, and the sandbox checked, once)."""
        return shared_pool(self.workers, self.limits())

    def _data(self) -> tuple[tuple[dict, ...], dict[str, tuple[int, ...]], int]:
        path = os.path.expanduser(self.path)
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size, self.format, self.on_error)
        records, skipped = _load(*key)
        return records, _splits(key, self.seed, self.split_fractions), skipped

    def problem(self, index: int, split: str = "train") -> Problem:
        """The `index`-th record of `split` in file order; metadata["tests"] holds its
        tests as JSON objects (TestCase fields, so the metadata survives the data
        pipeline's JSON), metadata["record"] the 1-based jsonl line."""
        rec = self._record_at(index, split)
        solution = f"```python\n{rec['solution']}\n```" if rec["solution"] else ""
        return Problem(
            id=self.problem_id(index, split),
            prompt=rec["prompt"],
            answer=rec["solution"],
            solution=solution,
            metadata={"tests": [dataclasses.asdict(t) for t in rec["tests"]],
                      "source": rec["source"], "record": rec["record"], "key": rec["key"]},
        )  # fmt: skip

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Runs the response's program on the problem's tests in the sandbox.

        Returns:
          CORRECT (reward 1) when every test passes; otherwise WRONG_ANSWER, or
          TIMEOUT when the first failing test ran out of time, with reward 0
          (reward="all") or the fraction passed; MALFORMED when there is no code block.
        """
        return self.verify_batch([problem], [response])[0]

    def verify_batch(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[Verdict]:
        """`verify` of each (problem, response), all programs in one `SandboxPool.run`."""
        tests = [tuple(TestCase(**t) for t in p.metadata["tests"]) for p in problems]
        return run_programs(self.pool(), tests, responses, fraction=self.reward == "fraction")


def run_programs(
    pool: SandboxPool,
    tests: Sequence[tuple[TestCase, ...]],
    responses: Sequence[str],
    *,
    fraction: bool,
) -> list[Verdict]:
    """Verdicts of responses on their tests, every program in one `pool.run` call.

    Args:
      pool: the sandbox pool (its workers run the programs concurrently).
      tests: each response's tests.
      responses: model responses; the last fenced block is the program.
      fraction: reward the fraction of tests passed (else 1 only when all pass).
    Returns:
      One Verdict per response, as `CodeTask.verify` describes.
    """
    if len(tests) != len(responses):
        raise ValueError(f"{len(tests)} test lists for {len(responses)} responses")
    programs = [extract_program(r) for r in responses]
    jobs = [CodeJob(prog, t) for prog, t in zip(programs, tests, strict=True) if prog is not None]
    results = iter(pool.run(jobs) if jobs else [])
    verdicts = []
    for program in programs:
        if program is None:
            verdicts.append(Verdict(0.0, MALFORMED, None, "no ```python code block"))
            continue
        result = next(results)
        statuses = [t.status for t in result.tests]
        detail = f"{statuses.count('passed')}/{len(statuses)} tests passed; statuses {statuses}"
        if result.all_passed:
            verdicts.append(Verdict(1.0, CORRECT, program, detail))
            continue
        reward = result.pass_fraction if fraction else 0.0
        reason = TIMEOUT if result.status == "timeout" else WRONG_ANSWER
        verdicts.append(Verdict(reward, reason, program, detail))
    return verdicts


def extract_program(response: str) -> str | None:
    """The last fenced code block of the response's tail, or None."""
    if not isinstance(response, str):
        return None
    blocks = _BLOCK.findall(response[-4 * MAX_RESPONSE_CHARS :])
    if not blocks or not blocks[-1].strip():
        return None
    return blocks[-1][:MAX_PROGRAM_CHARS]


def shared_pool(workers: int, limits: Limits) -> SandboxPool:
    """The process-wide pool for (workers, limits); building it runs the sandbox's
    self-test (SandboxUnavailable when programs cannot be isolated), once."""
    return _pool(workers, limits)


@functools.lru_cache(maxsize=4)
def _pool(workers: int, limits: Limits) -> SandboxPool:
    return SandboxPool(workers=workers, limits=limits)


@functools.lru_cache(maxsize=32)
def _splits(load_key: tuple, seed: int, fractions) -> dict[str, tuple[int, ...]]:
    """`hashed_splits` of the records `_load(*load_key)` reads, once per file version."""
    return hashed_splits([rec["key"] for rec in _load(*load_key)[0]], seed, fractions)


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int, fmt: str, on_error: str):
    """(records, number skipped), read once per file version; a ValueError names the
    file, the line and the field of a malformed record."""
    del mtime_ns, size  # cache key only
    if not path.endswith((".jsonl", ".ndjson")):
        raise ValueError(f"{path}: unsupported file type; valid: .jsonl, .ndjson")
    records, errors = [], []
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {line_no}"
            try:
                try:
                    raw = parse_line(line)
                except BadLine as e:
                    raise ValueError(f"{where}: {e}") from e
                records.append(_record(raw, where, fmt) | {"source": path, "record": line_no})
            except ValueError as e:
                if on_error == "raise":
                    raise
                errors.append(str(e))
    if not records:
        raise ValueError(f"{path}: no usable records ({len(errors)} malformed)")
    return tuple(records), len(errors)


def _record(raw: Any, where: str, fmt: str) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    if fmt == "auto":
        fmt = "livecodebench" if "question_content" in raw else "mbpp"
    return _livecodebench(raw, where) if fmt == "livecodebench" else _mbpp(raw, where)


def _text(raw: dict, field: str, where: str, required: bool = True) -> str:
    value = raw.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValueError(f"{where}: field {field!r} must be a non-empty string "
                         f"(has {sorted(raw)[:20]})")  # fmt: skip
    return value


def _livecodebench(raw: dict, where: str) -> dict:
    question = _text(raw, "question_content", where)
    starter = _text(raw, "starter_code", where, required=False)
    metadata = raw.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError as e:
            raise ValueError(f"{where}: field 'metadata' is not JSON ({e})") from e
    tests = []
    for field in ("public_test_cases", "private_test_cases"):
        for i, case in enumerate(_case_list(raw.get(field), f"{where}, field {field!r}")):
            tests.append(_lcb_case(case, f"{where}, field {field!r}[{i}]", metadata))
    if not tests:
        raise ValueError(f"{where}: no tests in 'public_test_cases' or 'private_test_cases'")
    functional = any(t.assertion is not None for t in tests)
    prompt = question
    if starter.strip():
        prompt += f"\n\nStart from this code:\n```python\n{starter}\n```"
    prompt += INSTRUCTION + ("" if functional else STDIN_INSTRUCTION)
    key = raw.get("question_id") or question
    return dict(prompt=prompt, solution="", tests=tuple(tests), key=str(key))


def _case_list(value: Any, where: str) -> list:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(
                f"{where}: not a JSON list of tests ({e}); LiveCodeBench's compressed "
                "private tests (base64/zlib/pickle) must be decompressed to JSON first"
            ) from e
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of tests, got {type(value).__name__}")
    return value


def _lcb_case(case: Any, where: str, metadata: dict) -> TestCase:
    if (
        not isinstance(case, dict)
        or not isinstance(case.get("input"), str)
        or not isinstance(case.get("output"), str)
    ):
        raise ValueError(f"{where}: a test needs string fields 'input' and 'output'")
    kind = case.get("testtype", "stdin")
    if kind == "stdin":
        return TestCase(stdin=case["input"], expected_stdout=case["output"])
    if kind != "functional":
        raise ValueError(f"{where}: testtype {kind!r} unknown; valid: ['stdin', 'functional']")
    func = metadata.get("func_name") if isinstance(metadata, dict) else None
    if not isinstance(func, str) or not func.isidentifier():
        raise ValueError(f"{where}: a functional test needs metadata.func_name, got {func!r}")
    try:
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        expected = json.loads(case["output"])
    except ValueError as e:
        raise ValueError(f"{where}: functional input/output must be JSON lines ({e})") from e
    return TestCase(assertion=f"assert Solution().{func}(*{args!r}) == {expected!r}")


def _mbpp(raw: dict, where: str) -> dict:
    question = raw.get("text") if isinstance(raw.get("text"), str) else raw.get("prompt")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: field 'text' or 'prompt' must be a non-empty string "
                         f"(has {sorted(raw)[:20]})")  # fmt: skip
    setup = _text(raw, "test_setup_code", where, required=False)
    if isinstance(raw.get("test_list"), list) and raw["test_list"]:
        tests = []
        for i, assertion in enumerate(raw["test_list"]):
            if not isinstance(assertion, str) or not assertion.strip():
                raise ValueError(f"{where}: field 'test_list'[{i}] must be a non-empty string")
            tests.append(TestCase(assertion=f"{setup}\n{assertion}" if setup else assertion))
        examples = "\n".join(raw["test_list"][:3])
        prompt = f"{question.strip()}\nYour code should pass these tests:\n{examples}"
    elif isinstance(raw.get("test"), str) and raw["test"].strip():
        test = raw["test"]
        entry = raw.get("entry_point")
        if "def check(" in test:
            if not isinstance(entry, str) or not entry.isidentifier():
                raise ValueError(f"{where}: a 'test' defining check() needs field 'entry_point'")
            test += f"\n\ncheck({entry})\n"
        tests = [TestCase(assertion=test)]
        prompt = question.rstrip()
    else:
        raise ValueError(f"{where}: no tests: field 'test_list' (list) or 'test' (string)")
    solution = raw.get("code") or raw.get("canonical_solution") or ""
    if raw.get("canonical_solution") and "prompt" in raw and "text" not in raw:
        solution = raw["prompt"] + raw["canonical_solution"]  # HumanEval: body after the prompt
    key = raw.get("task_id", question)
    return dict(prompt=prompt + INSTRUCTION, solution=solution if isinstance(solution, str) else "",
                tests=tuple(tests), key=str(key))  # fmt: skip
