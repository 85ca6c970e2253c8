"""Functional behaviour of real sandbox runs: statuses, stdin/stdout, assertions, the pool."""

import dataclasses

import pytest

from rlvr_jax.sandbox import (
    CodeJob,
    Limits,
    SandboxPool,
    SandboxUnavailable,
    TestCase,
    check_available,
)
from rlvr_jax.sandbox import jail as jail_lib
from rlvr_jax.sandbox.runner import run_test


def test_statuses_of_hand_written_programs(run1):
    assert run1("print(sum(map(int, input().split())))", TestCase("2 40", "42")).status == "passed"
    assert run1("print(41)", TestCase("", "42")).reason == "wrong_output"
    r = run1("while True: pass", cpu_seconds=1, wall_seconds=8)
    assert (r.status, r.reason) == ("timeout", "cpu_limit")
    ignores_sigxcpu = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
    ignores_sigxcpu += "while True: pass"
    r = run1(ignores_sigxcpu, cpu_seconds=1, wall_seconds=8)  # SIGKILL at the hard limit, 2 s
    assert (r.status, r.reason, r.exit_code) == ("timeout", "cpu_limit", 137)
    r = run1("import time\ntime.sleep(60)", wall_seconds=1)
    assert (r.status, r.reason) == ("timeout", "wall_limit") and r.seconds < 3
    r = run1("x = bytearray(400 << 20)", memory_mb=128)
    assert (r.status, r.reason) == ("memory", "memory_limit")
    r = run1("raise KeyError('k')")
    assert (r.status, r.exit_code) == ("crashed", 1) and "KeyError" in r.stderr
    r = run1("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (r.status, r.exit_code) == ("crashed", 128 + 11)


def test_stdin_stdout_and_assertion_tests_give_per_test_results(pool):
    echo = CodeJob(
        "import sys\nn = int(sys.stdin.readline())\nprint(*[i * i for i in range(n)])",
        (TestCase("3\n", "0 1 4"), TestCase("1\n", "0"), TestCase("2\n", "0 1 2")),
    )
    add = CodeJob(
        "def add(a, b):\n    return a + b if a < 10 else a - b",
        (
            TestCase(assertion="assert add(1, 2) == 3"),
            TestCase(assertion="assert add(10, 2) == 12"),
        ),
    )
    r_echo, r_add = pool.run([echo, add])
    assert [t.status for t in r_echo.tests] == ["passed", "passed", "failed"]
    assert r_echo.pass_fraction == pytest.approx(2 / 3) and not r_echo.all_passed
    assert r_echo.tests[2].stdout == "0 1\n"
    assert [t.status for t in r_add.tests] == ["passed", "failed"]
    assert r_add.tests[1].reason == "assertion" and r_add.status == "failed"


def test_exiting_before_the_assertion_does_not_pass_it(pool):
    """A zero exit status is not a pass: sys.exit(0), os._exit(0) and raising SystemExit
    before the appended assertion end the run early (the end-of-run marker is missing),
    while a program that prints and then passes its assertion still passes."""
    hacks = ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit",
             "print('rlvr-end-00')\nimport sys\nsys.exit(0)"]  # fmt: skip
    fine = "def f(x):\n    print('working')\n    return x + 1"
    test = (TestCase(assertion="assert f(1) == 2"),)
    results = pool.run([CodeJob(h, test) for h in hacks] + [CodeJob(fine, test)])
    for r in results[:-1]:
        assert r.status == "failed" and r.tests[0].reason == "exited_early", r
    assert results[-1].all_passed


def test_each_test_gets_a_fresh_working_directory(pool):
    program = (
        "import os\nprint(sorted(os.listdir('.')), os.getcwd())\nopen('state', 'w').write('x')"
    )
    [r] = pool.run([CodeJob(program, (TestCase(expected_stdout="[] /work"),) * 3)])
    assert r.all_passed, [t.stdout for t in r.tests]


def test_pool_keeps_job_order_and_bounds_concurrency():
    pool = SandboxPool(workers=2)
    # Later jobs finish first; results must still come back in job order.
    jobs = [
        CodeJob(f"import time\ntime.sleep({0.1 * (4 - i)})\nprint({i})", (TestCase("", str(i)),))
        for i in range(4)
    ]
    assert [r.status for r in pool.run(jobs)] == ["passed"] * 4
    # Each run reports when it slept (the monotonic clock is the host's: no time namespace).
    # 2 workers: some two runs overlap, never three, whatever the machine's load (a wall-
    # time bound on the whole call failed under load: 2.6 s against 2.4).
    program = "import time\na = time.monotonic()\ntime.sleep(0.6)\nprint(a, time.monotonic())"
    results = pool.run([CodeJob(program, (TestCase(),)) for _ in range(4)])
    assert all(r.all_passed for r in results)
    spans = [tuple(map(float, r.tests[0].stdout.split())) for r in results]
    most = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert most == 2, spans


def test_pool_limits_cap_job_limits():
    pool = SandboxPool(workers=1, limits=Limits(wall_seconds=1))
    [r] = pool.run([CodeJob("import time\ntime.sleep(30)", (TestCase(),), Limits(wall_seconds=60))])
    assert r.status == "timeout" and r.tests[0].seconds < 3


def test_unavailable_isolation_is_refused(monkeypatch):
    with pytest.raises(SandboxUnavailable, match="interpreter at '/no/python'"):
        check_available(python="/no/python")
    with monkeypatch.context() as m:
        m.setattr(jail_lib, "bwrap_version", lambda bwrap: (0, 4, 1))
        with pytest.raises(SandboxUnavailable, match=r"bubblewrap >= 0.6 .* is \(0, 4, 1\)"):
            SandboxPool()
    monkeypatch.setattr(jail_lib, "_which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*apt-get install -y bubblewrap"):
        SandboxPool()


def test_a_broken_sandbox_is_a_sandbox_error_not_a_run():
    broken = dataclasses.replace(jail_lib.find_jail(), bwrap="/nonexistent/bwrap")
    r = run_test(broken, "print(1)", TestCase(), Limits())
    assert (r.status, r.reason) == ("sandbox_error", "sandbox_start")
    # bubblewrap starts but cannot build the sandbox (a bind source that does not exist).
    broken = dataclasses.replace(jail_lib.find_jail(), ro_binds=("/usr", "/nonexistent-dir"))
    r = run_test(broken, "print(1)", TestCase(), Limits())
    assert r.status == "sandbox_error" and "nonexistent-dir" in r.stderr
