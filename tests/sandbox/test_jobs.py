"""The pure parts: limits, job validation, output comparison, classification, results."""

import pytest

from rlvr_jax.sandbox import CodeJob, Limits, ProgramResult, TestCase, TestResult
from rlvr_jax.sandbox.runner import classify, outputs_match, source_of


def test_limits_validate_and_tighten():
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
    a = Limits(cpu_seconds=2, wall_seconds=30, memory_mb=256)
    b = Limits(cpu_seconds=9, wall_seconds=3, memory_mb=1024, output_bytes=10)
    assert a.tightest(b) == Limits(cpu_seconds=2, wall_seconds=3, memory_mb=256, output_bytes=10)


def test_code_job_rejects_bad_fields():
    with pytest.raises(ValueError, match="language 'c'"):
        CodeJob("x", (TestCase(),), language="c")
    with pytest.raises(ValueError, match="tests is empty"):
        CodeJob("x", ())
    assert CodeJob("x", [TestCase()]).tests == (TestCase(),)
    with pytest.raises(ValueError, match="status 'ok'"):
        TestResult("ok")


def test_outputs_match_ignores_surrounding_whitespace_only():
    assert outputs_match("1 2\n3\n\n", "1 2\n3")
    assert outputs_match("  1 2  \r\n3", "1 2\n3\n")
    assert not outputs_match("1  2\n3", "1 2\n3")  # inner spacing counts
    assert not outputs_match("1 2\n3\n4", "1 2\n3")
    assert not outputs_match("", "0")


def test_source_appends_assertion_and_keeps_raw_bytes():
    assert source_of("def f(): return 1", TestCase(assertion="assert f() == 1")) == (
        b"def f(): return 1\n\nassert f() == 1\n"
    )
    raw = b"print(1) # \xff\xfe"
    assert source_of(raw.decode("utf-8", "surrogateescape"), TestCase()) == raw


@pytest.mark.parametrize(
    "kw,expected",
    [
        (dict(started=False, killed=None, exit_code=None), ("sandbox_error", "sandbox_start")),
        (dict(killed="wall_limit", exit_code=None), ("timeout", "wall_limit")),
        (dict(killed="output_limit", exit_code=None), ("crashed", "output_limit")),
        (dict(exit_code=152), ("timeout", "cpu_limit")),
        (dict(exit_code=1, stderr=b"Traceback...\nMemoryError\n"), ("memory", "memory_limit")),
        (
            dict(exit_code=1, stderr=b"  assert f(1) == 3\nAssertionError\n"),
            ("failed", "assertion"),
        ),
        (dict(exit_code=1, stderr=b"AssertionError: got 2\n"), ("failed", "assertion")),
        (
            dict(exit_code=1, stderr=b"AssertionError\nDuring handling...\nKeyError: 1\n"),
            ("crashed", "exit_1"),
        ),
        (dict(exit_code=137), ("crashed", "exit_137")),
        (dict(exit_code=137, seconds=2.5, cpu_hard_seconds=2), ("timeout", "cpu_limit")),
        (dict(exit_code=137, seconds=1.5, cpu_hard_seconds=2), ("crashed", "exit_137")),
        (dict(exit_code=0, stdout=b"3\n"), ("passed", "")),
        (dict(exit_code=0, stdout=b"4\n"), ("failed", "wrong_output")),
    ],
)
def test_classify(kw, expected):
    args = dict(started=True, killed=None, stdout=b"", stderr=b"") | kw
    assert classify(TestCase(expected_stdout="3"), **args) == expected


def test_program_result_status_and_fractions():
    passed, failed, timeout = TestResult("passed"), TestResult("failed"), TestResult("timeout")
    r = ProgramResult.of([passed, timeout, failed, passed])
    assert (r.status, r.all_passed, r.pass_fraction) == ("timeout", False, 0.5)
    r = ProgramResult.of([passed, passed])
    assert (r.status, r.all_passed, r.pass_fraction) == ("passed", True, 1.0)
