"""The code sandbox: model output executes only here.

    pool = SandboxPool(workers=2)
    [result] = pool.run([CodeJob(program, (TestCase(stdin="1 2", expected_stdout="3"),))])
    result.all_passed, result.pass_fraction, result.tests[0].status

Each test runs the program in a fresh bubblewrap sandbox (own user, mount, pid,
network namespaces; read-only /usr only; empty /work; no environment; rlimits on
CPU, memory, processes and file size; wall-clock and output limits enforced by
the host; a seccomp filter). See docs/sandbox.md.
"""

from rlvr_jax.sandbox.jail import SandboxUnavailable
from rlvr_jax.sandbox.jobs import STATUSES, CodeJob, Limits, ProgramResult, TestCase, TestResult
from rlvr_jax.sandbox.pool import SandboxPool, check_available

__all__ = [
    "STATUSES",
    "CodeJob",
    "Limits",
    "ProgramResult",
    "SandboxPool",
    "SandboxUnavailable",
    "TestCase",
    "TestResult",
    "check_available",
]
