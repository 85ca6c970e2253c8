"""A stand-in with the interface of rlvr_jax.sandbox (another agent's package) for tests.

The programs the tests run are the tests' own, so a plain subprocess stands in for
the isolation; what is checked is how the suite builds jobs and reads results.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys


@dataclasses.dataclass(frozen=True)
class TestCase:
    stdin: str | None = None
    expected_stdout: str | None = None
    assertion: str | None = None


@dataclasses.dataclass(frozen=True)
class Limits:
    wall_s: float = 5.0


@dataclasses.dataclass(frozen=True)
class CodeJob:
    program: str
    tests: tuple
    limits: Limits


@dataclasses.dataclass(frozen=True)
class ProgramResult:
    status: str
    tests: list
    all_passed: bool
    pass_fraction: float


class FakePool:
    jobs: list = []

    def __init__(self, workers):
        self.workers = workers

    def run(self, jobs):
        FakePool.jobs.extend(jobs)
        out = []
        for job in jobs:
            passed = []
            for t in job.tests:
                src = job.program if t.assertion is None else f"{job.program}\n{t.assertion}\n"
                r = subprocess.run(
                    [sys.executable, "-c", src],
                    input=t.stdin or "",
                    capture_output=True,
                    text=True,
                    timeout=job.limits.wall_s,
                )
                ok = r.returncode == 0 and (
                    t.expected_stdout is None or r.stdout.strip() == t.expected_stdout.strip()
                )
                passed.append(ok)
            frac = sum(passed) / len(passed)
            out.append(
                ProgramResult("passed" if all(passed) else "failed", passed, all(passed), frac)
            )
        return out


class FakeSandbox:
    TestCase, Limits, CodeJob, SandboxPool = TestCase, Limits, CodeJob, FakePool

    @staticmethod
    def check_available():
        return None


def fence(code: str) -> str:
    """A response whose program is `code` in a ```python block."""
    return f"Here is my program.\n```python\n{code}```\n"
