"""One run: the program on one test, in a fresh sandbox, watched from the host.

The host side feeds stdin from an anonymous file, reads stdout and stderr until
the output limit, enforces the wall-clock limit, and ends the run by killing
bubblewrap's process group; bubblewrap's pid-1 then dies (--die-with-parent),
which makes the kernel kill every process left in the run's pid namespace, so
no child outlives a run. `classify` (pure) turns what was seen into a status.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import signal
import subprocess
import tempfile
import time

from rlvr_jax.sandbox import seccomp
from rlvr_jax.sandbox.jail import Jail, bwrap_argv, cpu_limits
from rlvr_jax.sandbox.jobs import (
    CRASHED,
    FAILED,
    MEMORY,
    PASSED,
    SANDBOX_ERROR,
    TIMEOUT,
    Limits,
    TestCase,
    TestResult,
)

TAIL_CHARS = 2000  # of stdout/stderr kept in a TestResult
_MEMORY_ERROR = re.compile(rb"\bMemoryError\b|Cannot allocate memory|std::bad_alloc")
_ASSERTION_ERROR = re.compile(rb"(^|\n)AssertionError\b[^\n]*\n?$")
_SIGXCPU_EXIT = 128 + signal.SIGXCPU
_SIGKILL_EXIT = 128 + signal.SIGKILL
_CHUNK = 1 << 16
_GRACE_SECONDS = 5.0  # for the kernel to empty a killed pid namespace


def source_of(program: str, test: TestCase, marker: str | None = None) -> bytes:
    """The file the sandbox runs: the program, then the test's assertion if any, then
    (with `marker`) a line printing the marker: a test with an assertion passes only
    when the run reached its end, so `sys.exit(0)` or `os._exit(0)` before the
    assertion does not pass it.

    Lone surrogates (undecodable bytes kept by surrogateescape) go back to bytes
    as they were, so invalid UTF-8 reaches Python's parser, which rejects it.
    """
    text = program if test.assertion is None else f"{program}\n\n{test.assertion}\n"
    if marker is not None and test.assertion is not None:
        text += f"\nprint({marker!r}, flush=True)\n"
    return text.encode("utf-8", errors="surrogateescape")


def outputs_match(stdout: str, expected: str) -> bool:
    """LiveCodeBench's comparison: surrounding whitespace of the whole output and of
    each line is ignored; lines must otherwise be equal."""
    got = [line.strip() for line in stdout.strip().splitlines()]
    want = [line.strip() for line in expected.strip().splitlines()]
    return got == want


def classify(
    test: TestCase,
    *,
    started: bool,
    killed: str | None,
    exit_code: int | None,
    stdout: bytes,
    stderr: bytes,
    seconds: float = 0.0,
    cpu_hard_seconds: float = float("inf"),
    marker: str | None = None,
) -> tuple[str, str]:
    """(status, reason) of a run from what the host saw.

    Args:
      test: the test that ran.
      started: the program ran (bubblewrap reported its exit code, or the host
        killed it); False when bubblewrap could not build the sandbox.
      killed: why the host killed the run ("wall_limit", "output_limit"), or None.
      exit_code: the program's exit status (128 + signal if a signal ended it).
      stdout, stderr: the bytes kept (stderr: its tail).
      seconds: the run's wall-clock seconds.
      cpu_hard_seconds: the hard CPU limit; a SIGKILL after at least that long is
        the kernel enforcing it on a program that ignored SIGXCPU.
      marker: the end-of-run marker of an assertion test (`source_of`): a run that
        exits 0 without printing it last stopped before its assertion ("exited_early").
    """
    if not started:
        return SANDBOX_ERROR, "sandbox_start"
    if killed == "wall_limit":
        return TIMEOUT, killed
    if killed is not None:
        return CRASHED, killed
    if exit_code == _SIGXCPU_EXIT or (exit_code == _SIGKILL_EXIT and seconds >= cpu_hard_seconds):
        return TIMEOUT, "cpu_limit"
    if exit_code != 0:
        tail = stderr[-4096:]
        if _MEMORY_ERROR.search(tail):
            return MEMORY, "memory_limit"
        if _ASSERTION_ERROR.search(tail.rstrip(b"\n") + b"\n"):
            return FAILED, "assertion"
        return CRASHED, f"exit_{exit_code}"
    text = stdout.decode("utf-8", errors="replace")
    if marker is not None and test.assertion is not None:
        lines = text.rstrip().splitlines()
        if not lines or lines[-1].strip() != marker:
            return FAILED, "exited_early"
        text = "\n".join(lines[:-1])
    if test.expected_stdout is not None:
        return (
            (PASSED, "") if outputs_match(text, test.expected_stdout) else (FAILED, "wrong_output")
        )
    return PASSED, ""


def _parse_status(data: bytes) -> dict:
    """bubblewrap's JSON status lines, merged ({"child-pid": .., "exit-code": ..})."""
    status = {}
    for line in data.splitlines():
        try:
            status.update(json.loads(line))
        except ValueError:
            continue
    return status


def _kill(proc: subprocess.Popen, status_data: bytes) -> None:
    """Ends a run: SIGKILL to the sandbox's pid 1 ("child-pid"), whose death makes the
    kernel kill the rest of its pid namespace; bubblewrap exits only after that, so
    waiting on it waits until no process of the run is left. Before pid 1 exists,
    bubblewrap's own process group is killed instead."""
    status = _parse_status(status_data)
    pid = status.get("child-pid")
    try:
        if "exit-code" in status or proc.poll() is not None:
            return  # pid 1 has been reaped: its pid may no longer be the run's
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        else:  # bubblewrap is our unreaped child, so its group id is still its own
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_test(jail: Jail, program: str, test: TestCase, limits: Limits) -> TestResult:
    """Runs `program` on `test` in a fresh sandbox; never raises on the program's behaviour."""
    start = time.monotonic()
    deadline = start + limits.wall_seconds
    status_r, status_w = os.pipe()
    with (
        tempfile.TemporaryFile() as src,
        tempfile.TemporaryFile() as filt,
        tempfile.TemporaryFile() as stdin,
    ):
        marker = f"rlvr-end-{secrets.token_hex(16)}" if test.assertion is not None else None
        src.write(source_of(program, test, marker))
        filt.write(seccomp.filter_bytes(jail.machine))
        stdin.write(test.stdin.encode("utf-8", errors="surrogateescape"))
        for f in (src, filt, stdin):
            f.flush()
            f.seek(0)
        # The program gets stdin read-only: a fresh read-only open of the same file.
        stdin_ro = open(f"/proc/self/fd/{stdin.fileno()}", "rb")  # noqa: SIM115 (closed below)
        argv = bwrap_argv(
            jail, limits, program_fd=src.fileno(), seccomp_fd=filt.fileno(), status_fd=status_w
        )
        user = (
            {}
            if jail.run_as is None
            else {"user": jail.run_as[0], "group": jail.run_as[1], "extra_groups": []}
        )
        try:
            proc = subprocess.Popen(
                argv,
                stdin=stdin_ro,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(src.fileno(), filt.fileno(), status_w),
                env={},
                cwd="/",
                start_new_session=True,
                **user,
            )
        except OSError as e:
            stdin_ro.close()
            os.close(status_r)
            os.close(status_w)
            return TestResult(
                SANDBOX_ERROR, time.monotonic() - start, stderr=str(e), reason="sandbox_start"
            )
        os.close(status_w)
        stdin_ro.close()
        with os.fdopen(status_r, "rb", buffering=0) as status_file:
            stdout, stderr, status_data, killed = _watch(
                proc, status_file, deadline, limits.output_bytes
            )
    status = _parse_status(status_data)
    exit_code = status.get("exit-code")
    seconds = time.monotonic() - start
    state, reason = classify(
        test,
        seconds=seconds,
        cpu_hard_seconds=cpu_limits(limits)[1],
        started="exit-code" in status or killed is not None,
        killed=killed,
        exit_code=exit_code if killed is None else None,
        stdout=stdout,
        stderr=stderr,
        marker=marker,
    )
    return TestResult(
        status=state,
        seconds=seconds,
        stdout=stdout.decode("utf-8", errors="replace")[-TAIL_CHARS:],
        stderr=stderr.decode("utf-8", errors="replace")[-TAIL_CHARS:],
        exit_code=exit_code if killed is None else None,
        reason=reason,
    )


def _watch(
    proc: subprocess.Popen, status_file, deadline: float, output_bytes: int
) -> tuple[bytes, bytes, bytes, str | None]:
    """Drains stdout, stderr and the status pipe until they close, the deadline, or
    `output_bytes` of output; then waits for bubblewrap to exit.

    Returns (stdout kept, stderr kept, status bytes, why the run was killed or
    None). Past the output limit nothing more is kept: the run is killed, so
    memory stays bounded.
    """
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray(), status_file: bytearray()}
    output = 0
    killed = None
    with selectors.DefaultSelector() as sel:
        for stream in kept:
            sel.register(stream, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                killed = "wall_limit"
                break
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fileobj.fileno(), _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.fileobj is status_file:
                    kept[status_file] += chunk
                else:
                    kept[key.fileobj] += chunk[: max(0, output_bytes - output)]
                    output += len(chunk)
            if output > output_bytes:
                killed = "output_limit"
                break
    if killed is not None:
        _kill(proc, bytes(kept[status_file]))
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()) + _GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        killed = killed or "wall_limit"
        _kill(proc, bytes(kept[status_file]))
        try:
            proc.wait(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:  # pid 1 would not die: take bubblewrap down
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if killed is not None:  # the status lines written before the end
        kept[status_file] += status_file.read() or b""
    proc.stdout.close()
    proc.stderr.close()
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), bytes(kept[status_file]), killed
