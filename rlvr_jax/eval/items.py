"""One benchmark problem as the suites see it, and the tests of a code problem."""

from __future__ import annotations

import dataclasses
from typing import Any

KINDS = ("math", "choice", "code")
LETTERS = "ABCDEFGHIJ"  # MMLU-Pro has up to 10 options


@dataclasses.dataclass(frozen=True)
class CodeTest:
    """One test of a program: stdin -> expected stdout, or a Python assertion script.

    Exactly one form is set; `scoring.to_sandbox_tests` maps it to the sandbox's TestCase.
    """

    stdin: str | None = None
    expected_stdout: str | None = None
    assertion: str | None = None

    def __post_init__(self):
        io = self.stdin is not None and self.expected_stdout is not None
        if io == (self.assertion is not None):
            raise ValueError("a CodeTest is stdin + expected_stdout, or an assertion")


@dataclasses.dataclass(frozen=True)
class Item:
    """One problem of a benchmark.

    Attributes:
      id: the release's own id (unique within the benchmark), e.g. "test/algebra/1.json".
      kind: "math" (a final answer), "choice" (an option letter) or "code" (tests).
      body: the problem text shown to the model before the suite's instruction
        (for choice: question and lettered options; for code: statement and starter code).
      answer: math: the reference final answer; choice: the correct letter.
      options: choice: the option texts in the order shown (A, B, ...).
      tests: code: the tests a program must pass.
      program_prefix: code: text put before the model's program (MBPP+ test imports,
        or the HumanEval+ prompt when the program lacks the entry point's def).
      entry_point: code: the function a HumanEval+ program must define ("" if none).
      metadata: release fields kept for analysis (level, subject, difficulty, ...).
    """

    id: str
    kind: str
    body: str
    answer: str = ""
    options: tuple[str, ...] = ()
    tests: tuple[CodeTest, ...] = ()
    program_prefix: str = ""
    entry_point: str = ""
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
