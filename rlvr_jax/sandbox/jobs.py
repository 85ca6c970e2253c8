"""What the sandbox is asked to run and what it answers: plain frozen dataclasses.

A `CodeJob` is one program with its tests; each `TestCase` runs the program once,
in a fresh sandbox, either feeding `stdin` and comparing stdout with
`expected_stdout` (LiveCodeBench style) or appending an `assertion` snippet after
the program (HumanEval+/MBPP+ style). A `ProgramResult` keeps every test's
`TestResult`, so both the full pass rate and the average test pass rate can be
computed.
"""

from __future__ import annotations

import dataclasses

# TestResult.status values.
PASSED = "passed"
FAILED = "failed"  # ran to the end, wrong output or a failed assertion
TIMEOUT = "timeout"  # wall-clock or CPU-time limit
MEMORY = "memory"  # the address-space limit (MemoryError / ENOMEM)
CRASHED = "crashed"  # any other abnormal end: exception, signal, output limit
SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed; the program never ran
STATUSES = (PASSED, FAILED, TIMEOUT, MEMORY, CRASHED, SANDBOX_ERROR)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-run resource limits (one run = the program on one test).

    Attributes:
      cpu_seconds: CPU time of each process (RLIMIT_CPU); over it -> "timeout".
      wall_seconds: wall-clock time of the whole run, sandbox start included.
      memory_mb: address space of each process (RLIMIT_AS), in MiB.
      max_processes: processes and threads of the run (RLIMIT_NPROC, counted in
        the run's own user namespace).
      output_bytes: stdout + stderr bytes kept; more ends the run ("crashed").
      file_bytes: size of each writable tmpfs (/work, /tmp) and of any one file.
    """

    cpu_seconds: float = 5
    wall_seconds: float = 10
    memory_mb: int = 512
    max_processes: int = 32
    output_bytes: int = 1 << 20
    file_bytes: int = 16 << 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"Limits.{field.name} must be > 0, got {value!r}")

    def tightest(self, other: Limits) -> Limits:
        """Field-wise minimum of two limits (a pool's caps applied to a job's)."""
        return Limits(
            **{
                f.name: min(getattr(self, f.name), getattr(other, f.name))
                for f in dataclasses.fields(self)
            }
        )


@dataclasses.dataclass(frozen=True)
class TestCase:
    """One test: stdin/stdout, or an assertion appended to the program, or neither.

    With neither `expected_stdout` nor `assertion` the test passes when the program
    exits with status 0.
    """

    __test__ = False  # not a pytest class
    stdin: str = ""
    expected_stdout: str | None = None
    assertion: str | None = None


@dataclasses.dataclass(frozen=True)
class CodeJob:
    """A program and its tests. `language` is "python" (the only one supported)."""

    program: str
    tests: tuple[TestCase, ...]
    limits: Limits = Limits()
    language: str = "python"

    def __post_init__(self):
        if self.language != "python":
            raise ValueError(f"CodeJob.language {self.language!r} unsupported; valid: ['python']")
        if not self.tests:
            raise ValueError(
                "CodeJob.tests is empty; give at least one TestCase (TestCase() = exits 0)"
            )
        if not isinstance(self.tests, tuple):
            object.__setattr__(self, "tests", tuple(self.tests))


@dataclasses.dataclass
class TestResult:
    """The outcome of one run.

    Attributes:
      status: one of STATUSES.
      seconds: wall-clock seconds of the run (sandbox start included).
      stdout: the last `TAIL_CHARS` characters of stdout (decoded, invalid bytes replaced).
      stderr: the last `TAIL_CHARS` characters of stderr.
      exit_code: the program's exit status (128 + signal when killed); None if it
        never ended on its own (killed by the host side) or never started.
      reason: a short word on why (e.g. "wrong_output", "wall_limit", "output_limit").
    """

    __test__ = False
    status: str
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    reason: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown TestResult.status {self.status!r}; valid: {STATUSES}")


@dataclasses.dataclass
class ProgramResult:
    """All tests of one job. `status` is "passed" or the first failing test's status."""

    status: str
    tests: list[TestResult]

    @property
    def all_passed(self) -> bool:
        return all(t.status == PASSED for t in self.tests)

    @property
    def pass_fraction(self) -> float:
        return sum(t.status == PASSED for t in self.tests) / len(self.tests) if self.tests else 0.0

    @classmethod
    def of(cls, tests: list[TestResult]) -> ProgramResult:
        failing = [t.status for t in tests if t.status != PASSED]
        return cls(status=failing[0] if failing else PASSED, tests=tests)
