"""Real math data from a user-given jsonl/parquet file, checked with math-verify.

Splits: a record goes to train/validation/test by sha256(seed | record id, or
the question when the record has no id) against `split_fractions`, so its split
never depends on the other records or the file order, and repeated questions
share a split. Within a split, problems keep file order.

Verification: the final answer (last `\\boxed{}`, else last "Answer:" line) is
screened by linear-time string checks (length, control characters, non-ASCII
digits, brace balance, nesting depth, power towers, huge exponents/factorials:
MALFORMED), then compared by math-verify in warm checker processes. math-verify
0.9's own timeouts use `signal.alarm`: whole seconds, a ValueError off the main
thread, and a timed-out check returns False like a wrong answer. So each checker
process interrupts itself with a sub-second `setitimer` alarm at 3/4 of the time
left, and the caller kills (and replaces in the background) a checker that has
not answered within `timeout_s`, even one stuck in C code: the limit holds in
any thread. Measured here after warm-up: 1-30 ms per check, 60-180 ms for
intervals and sets. The first check of a process waits ~2 s for the checkers to
start (`start_checker()` starts them early). Responses only meet math-verify's
LaTeX parser; its plain-expression parser runs sympy's eval-based `parse_expr`.
Without math-verify (or if checker processes cannot start), answers are compared
by normalised exact match, with a warning logged once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import math
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from typing import ClassVar

from rlvr_jax.tasks import (
    CORRECT,
    MALFORMED,
    TIMEOUT,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
    register,
)
from rlvr_jax.tasks.base import SPLITS

logger = logging.getLogger(__name__)

SAMPLE_PATH = os.path.join(os.path.dirname(__file__), "data", "math_sample.jsonl")
PROMPT_SUFFIX = "\nPut your final answer in \\boxed{}."
MAX_ANSWER_CHARS = 300  # longer final answers are MALFORMED before any parsing
MAX_DEPTH = 20  # bracket nesting depth of an answer
MAX_EXPONENT = 10_000  # largest value of an exponent (itself estimated, for nested powers)
MAX_POWER_DIGITS = 100_000  # most digits of a power with a numeric base
CHECKER_PROCESSES = 2
STARTUP_TIMEOUT_S = 120.0  # a checker must import math-verify and warm up within this
_CHECKER_MEMORY_BYTES = 4 << 30


@register
@dataclasses.dataclass(frozen=True)
class MathFileTask(Task):
    """Problems read from a jsonl or parquet file of math questions with final answers.

    Attributes:
      path: a .jsonl/.ndjson or .parquet file; "" means the shipped 18-problem sample.
      question_field: record field with the question text.
      answer_field: record field with the final answer (string or number).
      solution_field: field with a worked solution, used when a record has it (else
        the solution is "The answer is \\boxed{<answer>}."); None: never used.
      id_field: field hashed for the split when a record has it (else the question).
      split_fractions: (train, validation, test) shares, >= 0, summing to 1;
        (0, 0, 1) makes a whole file the test split.
      on_error: "raise" on a malformed record, or "skip" it; skipped records are
        counted (`num_skipped()`) and their total is logged as a warning.
      timeout_s: wall-clock limit of one math-verify comparison.
      checker: "math_verify", or "exact" (normalised string / rational match).
    """

    name: ClassVar[str] = "math_file"
    path: str = ""
    question_field: str = "problem"
    answer_field: str = "answer"
    solution_field: str | None = "solution"
    id_field: str | None = "id"
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    on_error: str = "raise"
    timeout_s: float = 1.0
    checker: str = "math_verify"

    def __post_init__(self):
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.checker not in ("math_verify", "exact"):
            raise ValueError(f"checker must be 'math_verify' or 'exact', got {self.checker!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        fractions = tuple(float(f) for f in self.split_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
            raise ValueError(
                "split_fractions must be 3 numbers >= 0 summing to 1 (train, validation, "
                f"test), got {self.split_fractions}"
            )
        object.__setattr__(self, "split_fractions", fractions)  # a list from a config is fine

    def _data(self) -> tuple[tuple[dict, ...], dict[str, tuple[int, ...]], int]:
        """(records, record indices per split, number skipped), cached per file version."""
        path = os.path.expanduser(self.path) if self.path else SAMPLE_PATH
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size, self.question_field, self.answer_field,
               self.solution_field, self.id_field, self.on_error)  # fmt: skip
        records, skipped = _load(*key)
        return records, _splits(key, self.seed, self.split_fractions), skipped

    def num_problems(self, split: str = "train") -> int:
        """Number of records in `split`."""
        _check_split(split)
        return len(self._data()[1][split])

    def num_skipped(self) -> int:
        """Malformed records skipped while loading (0 with on_error="raise")."""
        return self._data()[2]

    def problem(self, index: int, split: str = "train") -> Problem:
        """The `index`-th record of `split` in file order.

        Returns:
          A Problem; metadata: source (path), record (1-based jsonl line or 0-based
          parquet row), key (what the split hashed), has_solution, fields (the
          record's other scalar fields, e.g. level or subject).

        Raises:
          IndexError: `index` is outside [0, num_problems(split)).
        """
        _check_split(split)
        records, splits, _ = self._data()
        if not 0 <= index < len(splits[split]):
            raise IndexError(
                f"problem index {index} out of range: split {split!r} has "
                f"{len(splits[split])} problems"
            )
        rec = records[splits[split][index]]
        meta = {k: rec[k] for k in ("source", "record", "key", "has_solution")}
        return Problem(
            id=self.problem_id(index, split),
            prompt=rec["question"] + PROMPT_SUFFIX,
            answer=rec["answer"],
            solution=rec["solution"],
            metadata={**meta, "fields": dict(rec["fields"])},
        )

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Compares the final answer of `response` with `problem.answer`.

        Returns:
          CORRECT (reward 1) if equivalent, WRONG_ANSWER, MALFORMED (no final answer,
          or one refused by the screen) or TIMEOUT (past `timeout_s`), reward 0.
        """
        pred = _strip_wrappers(extract_answer(response) or "")
        if not pred:
            return Verdict(0.0, MALFORMED, None, "no \\boxed{} or 'Answer:' final answer")
        refusal = _screen(pred)
        if refusal is not None:
            return Verdict(0.0, MALFORMED, pred[:MAX_ANSWER_CHARS], refusal)
        gold = _strip_wrappers(str(problem.answer))
        if _normalise(pred) == _normalise(gold):
            return Verdict(1.0, CORRECT, pred, "identical after normalisation")
        if self.checker == "math_verify" and _math_verify_available():
            status, detail = _get_pool().check(gold, pred, self.timeout_s)
            if status != "unavailable":
                reason = {"correct": CORRECT, "wrong": WRONG_ANSWER, "timeout": TIMEOUT}[status]
                return Verdict(float(reason == CORRECT), reason, pred, detail)
            _warn_fallback(f"math-verify checker processes failed to start ({detail})")
        elif self.checker == "math_verify":
            _warn_fallback("math-verify is not installed (pip install math-verify) or not POSIX")
        ok = _exact_equal(gold, pred)
        return Verdict(float(ok), CORRECT if ok else WRONG_ANSWER, pred, "exact match")


def start_checker() -> None:
    """Starts the math-verify checker processes now and waits until they are ready."""
    if _math_verify_available():
        _get_pool().wait_ready()


# ---------------------------------------------------------------- loading


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {SPLITS}")


@functools.lru_cache(maxsize=8)
def _load(path, mtime_ns, size, q_field, a_field, s_field, id_field, on_error):
    """Reads and validates every record once per (file version, field options).

    Returns:
      (records, number skipped); each record a dict of question, answer, solution,
      key, source, record, has_solution, fields.
    """
    del mtime_ns, size  # only in the cache key, so an edited file is read again
    records, errors, total = [], [], 0
    for where, raw in _raw_records(path):
        total += 1
        try:
            records.append(_record(raw, f"{path}, {where}", q_field, a_field, s_field, id_field))
        except ValueError as e:
            if on_error == "raise":
                raise
            errors.append(str(e))
    if errors:
        logger.warning(
            "%s: skipped %d malformed records of %d (on_error='skip'); first: %s",
            path, len(errors), total, errors[0],
        )  # fmt: skip
    if not records:
        raise ValueError(f"{path}: no usable records ({total} read, {len(errors)} malformed)")
    return tuple(records), len(errors)


def _raw_records(path: str):
    """Yields ("line N" / "record N", dict or the error that made the record unreadable)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq  # optional dependency, only for parquet files

        for row, raw in enumerate(pq.read_table(path).to_pylist()):
            yield f"record {row}", raw
    elif path.endswith((".jsonl", ".ndjson")):
        with open(path, "rb") as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        raw = json.loads(line.decode("utf-8"))
                    except (UnicodeDecodeError, json.JSONDecodeError) as e:
                        raw = ValueError(f"invalid JSON ({e})")
                    yield f"line {line_no}", raw
    else:
        raise ValueError(f"{path}: unsupported file type; valid: .jsonl, .ndjson, .parquet")


def _record(raw, where: str, q_field, a_field, s_field, id_field) -> dict:
    """Validates one raw record; a ValueError names `where` (file and line) and the field."""
    if isinstance(raw, Exception):
        raise ValueError(f"{where}: {raw}")
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")

    def text(field, required):
        value = raw.get(field) if field else None
        if value is None and required:
            raise ValueError(f"{where}: missing field {field!r} (has {sorted(raw)[:20]})")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # numeric answers / ids such as 72 or 0.5
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{where}: field {field!r} must be a non-empty string")
        return value and value.strip()

    question, answer = text(q_field, True), text(a_field, True)
    if "\\boxed{" in answer:  # some data sets store the gold answer boxed
        answer = extract_answer(answer) or answer
    solution = text(s_field, False)
    full = solution or f"The answer is \\boxed{{{answer}}}."
    if extract_answer(full) is None:  # the SFT target must state its answer checkably
        full += f"\nThe answer is \\boxed{{{answer}}}."
    used = {q_field, a_field, s_field, id_field}
    extra = {k: v for k, v in raw.items() if k not in used and isinstance(v, (str, int, float))}
    return dict(
        question=question, answer=answer, solution=full, key=text(id_field, False) or question,
        source=where.rsplit(", ", 1)[0], record=int(where.split()[-1]),
        has_solution=solution is not None, fields=extra,
    )  # fmt: skip


@functools.lru_cache(maxsize=32)
def _splits(load_key: tuple, seed: int, fractions) -> dict[str, tuple[int, ...]]:
    """Record indices per split: sha256(seed|record key) as a uniform number in [0, 1)."""
    bounds = (fractions[0], fractions[0] + fractions[1])
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, rec in enumerate(_load(*load_key)[0]):
        digest = hashlib.sha256(f"{seed}|{rec['key']}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2.0**64
        out[SPLITS[0] if u < bounds[0] else SPLITS[1] if u < bounds[1] else SPLITS[2]].append(i)
    return {s: tuple(v) for s, v in out.items()}


# ---------------------------------------------------------------- answers

_SPACING = re.compile(r"\\(?:left|right|displaystyle)\b|\\[!,;: ]|\s+")
_RATIONAL = re.compile(r"(-?)(?:\\frac\{(\d{1,60})\}\{(\d{1,60})\}|(\d{1,60})/(\d{1,60}))")
_DECIMAL = re.compile(r"-?\d{1,60}(?:\.\d{1,60})?")


def _strip_wrappers(answer: str) -> str:
    """Removes $...$, \\(...\\), **bold** and a trailing period around a final answer."""
    answer = answer[: 4 * MAX_ANSWER_CHARS].strip()
    for _ in range(3):
        for left, right in (("$", "$"), ("**", "**"), ("\\(", "\\)")):
            if (
                len(answer) > len(left + right)
                and answer.startswith(left)
                and answer.endswith(right)
            ):
                answer = answer[len(left) : -len(right)].strip()
        answer = answer.rstrip(".").strip()
    return answer


def _screen(answer: str) -> str | None:
    """Why `answer` is refused before parsing (MALFORMED), or None. Linear time."""
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    depth = max_depth = braces = 0
    for c in answer:
        if (ord(c) < 32 and c != "\t") or c == "\x7f":
            return "control character in answer"
        if c.isdigit() and not c.isascii():
            return "non-ASCII digit in answer"
        if c in "([{":
            depth += 1
            max_depth = max(max_depth, depth)
        elif c in ")]}":
            depth = max(depth - 1, 0)  # intervals like [1, 2) mix bracket kinds
        braces += (c == "{") - (c == "}")
        if braces < 0:
            return "unbalanced braces"
    if braces:
        return "unbalanced braces"
    if max_depth > MAX_DEPTH:
        return f"brackets nested deeper than {MAX_DEPTH}"
    try:
        _log_bound(answer)
    except _Refused as e:
        return str(e)
    return None


class _Refused(Exception):
    """Why an answer is refused by the screen."""


def _log_bound(s: str) -> float:
    """log10 of a rough upper bound of the numbers `s` evaluates to (0 where symbolic).

    Walks numbers, bracket groups (recursively), powers and factorials; a power
    with a numeric base has log10 = exponent value * log10(base), so the numbers
    sympy would build are estimated without building them.

    Raises:
      _Refused: a power tower (a^b^c), an exponent above MAX_EXPONENT, a power
        with more than MAX_POWER_DIGITS digits, or a factorial of 1000 or more.
    """
    best, last, i = 0.0, None, 0  # last: log10 of the preceding number or group
    while i < len(s):
        c = s[i]
        if c.isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            last, i = math.log10(int(s[i:j]) or 1), j
        elif c in "([{":
            j, depth = i, 0
            while j < len(s):  # intervals like [1, 2) mix bracket kinds
                depth += (s[j] in "([{") - (s[j] in ")]}")
                if depth == 0:
                    break
                j += 1
            last, i = _log_bound(s[i + 1 : j]), j + 1
        elif s.startswith(("^", "**"), i):
            exponent, i = _exponent_at(s, i + 1 + (c == "*"))
            if s[i:].lstrip().startswith(("^", "**")):
                raise _Refused("power tower")
            if exponent.startswith("{"):
                exponent = exponent[1:-1]
            log_exponent = _log_bound(exponent)
            if log_exponent > math.log10(MAX_EXPONENT):
                raise _Refused("exponent too large")
            last = (last or 0.0) * 10**log_exponent
            if last > MAX_POWER_DIGITS:
                raise _Refused("power too large")
        elif c == "!" and not s.startswith("!=", i):
            if last is not None and last >= 3:
                raise _Refused("factorial of a number >= 1000")
            last, i = (last or 0.0) * 10 ** (last or 0.0), i + 1  # log10(n!) <= n log10(n)
        else:
            last, i = (last if c in " \t" else None), i + 1
        best = max(best, last or 0.0)
    return best


def _exponent_at(s: str, i: int) -> tuple[str, int]:
    """The exponent starting at `i` (after spaces and signs) and the index after it."""
    while i < len(s) and s[i] in " \t+-":
        i += 1
    if i < len(s) and s[i] in "{(":
        close, depth = {"{": "}", "(": ")"}[s[i]], 0
        for j in range(i, len(s)):
            depth += (s[j] == s[i]) - (s[j] == close)
            if depth == 0:
                return s[i : j + 1], j + 1
        return s[i:], len(s)
    run = re.match(r"\d+|\\[A-Za-z]+|.|$", s[i:])
    return run.group(), i + run.end()


def _normalise(answer: str) -> str:
    """Spacing-insensitive form of a LaTeX answer for string comparison."""
    answer = answer.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _SPACING.sub("", answer).rstrip(".")


def _as_fraction(answer: str) -> Fraction | None:
    """The exact value of an integer, decimal, a/b or \\frac{a}{b} (else None)."""
    if _DECIMAL.fullmatch(answer):
        return Fraction(answer)
    m = _RATIONAL.fullmatch(answer)
    if not m or int(m[3] or m[5]) == 0:
        return None
    return Fraction(int(m[2] or m[4]), int(m[3] or m[5])) * (-1 if m[1] else 1)


def _exact_equal(gold: str, pred: str) -> bool:
    """The fallback comparison: equal normalised strings or equal simple rationals."""
    g, p = _normalise(gold), _normalise(pred)
    return g == p or (_as_fraction(g) is not None and _as_fraction(g) == _as_fraction(p))


_FALLBACK_WARNED = False


def _warn_fallback(why: str) -> None:
    global _FALLBACK_WARNED
    if not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        logger.warning("math_file: %s; comparing answers by exact normalised match", why)


def _math_verify_available() -> bool:
    # The checker processes need select() on pipes and setitimer: POSIX only.
    return os.name == "posix" and importlib.util.find_spec("math_verify") is not None


# ---------------------------------------------------------------- checker processes


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
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (_CHECKER_MEMORY_BYTES, resource.RLIM_INFINITY))
    except (ImportError, ValueError, OSError):
        pass
    try:
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        from math_verify import LatexExtractionConfig, parse, verify

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
        code = "from rlvr_jax.tasks.math_data import _checker_main; _checker_main()"
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

    def check(self, gold: str, pred: str, timeout_s: float) -> tuple[str, str]:
        """(status, detail), status one of correct, wrong, timeout, unavailable."""
        self.wait_ready()  # start-up is paid once, outside the per-check limit
        deadline = time.monotonic() + timeout_s
        try:
            checker = self._idle.get(timeout=timeout_s)
        except queue.Empty:
            with self._lock:
                if self._live == 0 and self._starting == 0:
                    return "unavailable", self._error
            return "timeout", "no checker process free within the time limit"
        if deadline - time.monotonic() < 1e-3:  # no time left to check: keep the checker
            self._idle.put(checker)
            return "timeout", "no checker process free within the time limit"
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


def _get_pool() -> _Pool:
    """The process-wide pool, rebuilt after a fork (pipes cannot be shared)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL, _POOL_PID = _Pool(CHECKER_PROCESSES), os.getpid()
        return _POOL
