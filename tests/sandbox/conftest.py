"""A shared sandbox pool and host-side probes for the sandbox tests."""

import os
from pathlib import Path

import pytest

from rlvr_jax.sandbox import CodeJob, Limits, SandboxPool, TestCase


@pytest.fixture(scope="session")
def pool() -> SandboxPool:
    # Fails (does not skip) with SandboxUnavailable's message when bubblewrap is missing.
    return SandboxPool(workers=2)


@pytest.fixture
def run1(pool):
    """Runs one program on one test (default: TestCase()) and returns its TestResult."""

    def run(program: str, test: TestCase | None = None, **limits):
        [result] = pool.run([CodeJob(program, (test or TestCase(),), Limits(**limits))])
        return result.tests[0]

    return run


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found
