"""Warm math-verify checker processes with a hard per-check time limit.

math-verify 0.9's own timeouts use `signal.alarm`: whole seconds, a ValueError
off the main thread, and a timed-out check returns False like a wrong answer.
So each checker process interrupts itself with a sub-second `setitimer` alarm
at 3/4 of the time left, and the caller kills (and replaces in the background)
a checker that has not answered within the limit, even one stuck in C code:
the limit holds in any thread. The limit starts when a checker is free: a call
made while every checker is busy (other threads) or restarting waits for one
first, so a busy pool never scores a correct answer as a timeout. Used by
`rlvr_jax.tasks.math_data`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time

CHECKER_PROCESSES = 2
STARTUP_TIMEOUT_S = 120.0  # a checker must import math-verify and warm up within this
_CHECKER_MEMORY_BYTES = 4 << 30

_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("[1,2)", "(1,2]"),
    ("\\{1\\}", "x=1"),
    ("1", "\\sqrt{-1}"),
    ("1", "f(x)"),
    ("1", "\\begin{pmatrix}1\\end{pmatrix}"),
)


class _SoftTimeout(BaseException):
    """Raised by the checker's alarm; a BaseException so math-verify cannot swallow it."""


def _checker_main() -> None:
    """Checker process: answers JSON lines [gold, pred, soft_s] with [status, detail]."""
    out = os.fdopen(os.dup(1), "w")  # the protocol channel
    os.dup2(2, 1)  # stray prints of libraries must not corrupt the protocol

    def reply(status: str, detail: str) -> None:
        out.write(json.dumps([status, detail]) + "\n")
        out.flush()

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        import resource  # lazy: POSIX only

        resource.setrlimit(resource.RLIMIT_AS, (_CHECKER_MEMORY_BYTES, resource.RLIM_INFINITY))
    except (ImportError, ValueError, OSError):
        pass
    try:
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        from math_verify import LatexExtractionConfig, parse, verify  # optional dependency

        config = [LatexExtractionConfig(boxed_match_priority=0)]

        def mv_parse(answer: str):
            # parsing_timeout=None: math-verify's whole-second alarm would clash with ours.
            return parse(f"\\boxed{{{answer}}}", extraction_config=config, parsing_timeout=None)

        parse_gold = functools.lru_cache(maxsize=256)(mv_parse)
        for gold, pred in _WARM_UP:  # the first use of a sympy code path costs 50-300 ms
            verify(parse_gold(gold), mv_parse(pred), timeout_seconds=None)
    except BaseException as e:
        reply("error", f"{type(e).__name__}: {e}")
        return
    reply("ready", "")

    def on_alarm(signum, frame):
        raise _SoftTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    for line in sys.stdin:
        gold, pred, soft_s = json.loads(line)
        try:
            signal.setitimer(signal.ITIMER_REAL, max(soft_s, 1e-3))
            ok = verify(parse_gold(gold), mv_parse(pred), timeout_seconds=None)
            signal.setitimer(signal.ITIMER_REAL, 0)
            status, detail = ("correct", "math-verify") if ok else ("wrong", "math-verify: differ")
        except _SoftTimeout:
            status, detail = "timeout", "math-verify exceeded the time limit"
        except Exception as e:  # math-verify should not raise; never lose the checker to it
            status, detail = "wrong", f"math-verify error: {type(e).__name__}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        reply(status, detail)


class _Checker:
    """One checker process, started by `python -c` so the caller's main module never re-runs."""

    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        code = "from rlvr_jax.tasks.math_checker import _checker_main; _checker_main()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        self._buffer = b""

    def send(self, gold: str, pred: str, soft_s: float) -> None:
        self.proc.stdin.write((json.dumps([gold, pred, soft_s]) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self, timeout_s: float) -> list | None:
        """The next reply, or None when none arrives within `timeout_s`."""
        deadline, fd = time.monotonic() + timeout_s, self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("checker process exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class _Pool:
    """Warm checker processes; one that misses its deadline is killed and replaced."""

    def __init__(self, size: int):
        self._idle: queue.Queue[_Checker] = queue.Queue()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._live = self._starting = 0
        self._error = ""
        for _ in range(size):
            self._spawn_async()

    def _spawn_async(self, old: _Checker | None = None) -> None:
        with self._lock:
            self._starting += 1
        threading.Thread(target=self._spawn, args=(old,), daemon=True).start()

    def _spawn(self, old: _Checker | None) -> None:
        if old is not None:
            old.kill()  # and reap it, off the caller's clock
        checker, error = None, ""
        try:
            checker = _Checker()
            reply = checker.receive(STARTUP_TIMEOUT_S) or ["error", "start-up timed out"]
            error = "" if reply[0] == "ready" else str(reply[1])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        if error and checker is not None:
            checker.kill()
        with self._lock:
            self._starting -= 1
            self._live += not error
            self._error = error or self._error
        if not error:
            self._idle.put(checker)
        self._ready.set()

    def wait_ready(self) -> None:
        self._ready.wait(STARTUP_TIMEOUT_S)

    def wait_idle(self, timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
        """Waits until no checker is starting and every live one is idle; True if so."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self._lock:
                if self._starting == 0 and self._idle.qsize() >= self._live:
                    return True
            time.sleep(0.01)
        return False

    def _acquire(self) -> _Checker | None:
        """A free checker, waiting while the others are busy or restarting; None if none lives.

        The wait does not count against a check's time limit: a correct answer must
        not be scored TIMEOUT because other checks (threads) hold the checkers or a
        killed one is being replaced.
        """
        end = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                return self._idle.get(timeout=0.05)
            except queue.Empty:
                with self._lock:
                    if self._live == 0 and self._starting == 0:
                        return None
                if time.monotonic() > end:
                    return None

    def check(self, gold: str, pred: str, timeout_s: float) -> tuple[str, str]:
        """(status, detail), status one of correct, wrong, timeout, unavailable.

        `timeout_s` bounds the check itself, from the moment a checker process is
        free; waiting for one (start-up, busy or restarting checkers) is not counted.
        """
        self.wait_ready()  # start-up is paid once, outside the per-check limit
        checker = self._acquire()
        if checker is None:
            with self._lock:
                error = self._error if self._live == 0 else ""
            return "unavailable", error or f"no checker process free within {STARTUP_TIMEOUT_S} s"
        deadline = time.monotonic() + timeout_s
        try:
            # The checker's own alarm at 3/4 of the time left usually answers first,
            # so that a slow check does not cost a process restart.
            checker.send(gold, pred, 0.75 * max(deadline - time.monotonic(), 0.0))
            reply = checker.receive(deadline - time.monotonic())
            if reply is not None:
                self._idle.put(checker)
                return reply[0], reply[1]
            detail = "checker process killed at the time limit"
        except (EOFError, OSError, ValueError) as e:
            detail = f"checker process failed ({type(e).__name__})"
        with self._lock:
            self._live -= 1
        self._spawn_async(checker)
        return "timeout", detail


_POOL: _Pool | None = None
_POOL_PID = -1
_POOL_LOCK = threading.Lock()


def get_pool() -> _Pool:
    """The process-wide checker pool, rebuilt after a fork (pipes cannot be shared).

    Returns:
      The pool; `check(gold, pred, timeout_s)` returns (status, detail) with status
      one of correct, wrong, timeout, unavailable; `wait_ready()` waits for start-up,
      `wait_idle()` until no checker is busy or restarting.
    """
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL, _POOL_PID = _Pool(CHECKER_PROCESSES), os.getpid()
        return _POOL
