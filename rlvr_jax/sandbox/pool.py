"""A bounded pool of sandbox runs, for training rewards and evaluation.

`SandboxPool(workers)` runs at most `workers` sandboxes at once (threads that
each wait on one bubblewrap process; the programs themselves run outside
Python). Every test of every job is one run; results come back in job order.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

from rlvr_jax.sandbox.jail import Jail, SandboxUnavailable, find_jail
from rlvr_jax.sandbox.jobs import PASSED, CodeJob, Limits, ProgramResult, TestCase
from rlvr_jax.sandbox.runner import run_test

_DEFAULT_LIMITS = Limits()
_PROBE = 'import sys\nprint("sandbox ok", sys.version_info[0])\n'


def probe(jail: Jail) -> None:
    """Runs one trivial program; raises SandboxUnavailable with bubblewrap's words if
    the sandbox cannot be built here (e.g. user namespaces disabled)."""
    result = run_test(
        jail, _PROBE, TestCase(expected_stdout="sandbox ok 3"), Limits(wall_seconds=30)
    )
    if result.status != PASSED:
        raise SandboxUnavailable(
            f"the code sandbox failed its self-test ({result.status}, {result.reason}) with "
            f"{jail.bwrap}; unprivileged user namespaces must be allowed "
            f"(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0). "
            f"stderr: {result.stderr.strip()[-500:]!r}"
        )


def check_available(python: str | None = None) -> None:
    """Raises SandboxUnavailable, saying what is missing, unless programs can be isolated."""
    probe(find_jail(python))


class SandboxPool:
    """Runs CodeJobs in sandboxes, at most `workers` at a time.

    Args:
      workers: concurrent sandboxes.
      limits: caps on every run; a job's own limits apply where tighter.
      python: the interpreter inside the sandbox (default: /usr/bin/python3).

    Raises:
      SandboxUnavailable: at construction, when isolation cannot be provided (the
        pool never runs a program unsandboxed).
    """

    def __init__(
        self, workers: int = 2, limits: Limits = _DEFAULT_LIMITS, *, python: str | None = None
    ):
        if workers < 1:
            raise ValueError(f"SandboxPool workers must be >= 1, got {workers}")
        self.workers = workers
        self.limits = limits
        self._jail = find_jail(python)
        probe(self._jail)

    def run(self, jobs: Sequence[CodeJob]) -> list[ProgramResult]:
        """Runs every test of every job; returns one ProgramResult per job, in order."""
        runs = [(j, t) for j, job in enumerate(jobs) for t in range(len(job.tests))]
        results = {}
        with concurrent.futures.ThreadPoolExecutor(
            self.workers, thread_name_prefix="sandbox"
        ) as ex:
            futures = {
                ex.submit(
                    run_test,
                    self._jail,
                    jobs[j].program,
                    jobs[j].tests[t],
                    jobs[j].limits.tightest(self.limits),
                ): (j, t)
                for j, t in runs
            }
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
        return [
            ProgramResult.of([results[j, t] for t in range(len(job.tests))])
            for j, job in enumerate(jobs)
        ]
