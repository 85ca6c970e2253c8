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
any thread. The bound of one check is therefore `timeout_s` (default 1 s; a
check past it is a TIMEOUT verdict), not the <100 ms of the synthetic tasks'
verifiers, counted from the moment a checker is free: a call made while every
checker is busy with other threads' checks, or restarting after a killed one,
waits for one first, so a busy pool never turns a correct answer into a
timeout. Most checks take 1-30 ms after warm-up, intervals and sets 60-180 ms,
and adversarial answers that pass the screen use the whole budget (749 ms was
measured for one). Building the task starts the checker processes in the
background (~2-3 s; `start_checker()` also waits for them), so only a verify
call made within those seconds waits for them. Responses only meet math-verify's
LaTeX parser; its plain-expression parser runs sympy's eval-based `parse_expr`.
Without math-verify (or if checker processes cannot start), answers are compared
by normalised exact match, with a warning logged once.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import os
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
from rlvr_jax.tasks.file_splits import FileSplits, check_fractions, hashed_splits
from rlvr_jax.tasks.jsonl import BadLine, number_text, parse_line

# Re-exported: the answer screen and the checker processes live in their own modules.
from rlvr_jax.tasks.math_answers import (  # noqa: F401
    MAX_ANSWER_CHARS,
    MAX_DEPTH,
    MAX_EXPONENT,
    MAX_POWER_DIGITS,
    exact_equal,
    normalise,
    screen,
    strip_wrappers,
)
from rlvr_jax.tasks.math_checker import (  # noqa: F401
    CHECKER_PROCESSES,
    STARTUP_TIMEOUT_S,
)
from rlvr_jax.tasks.math_checker import get_pool as _get_pool

logger = logging.getLogger(__name__)

SAMPLE_PATH = os.path.join(os.path.dirname(__file__), "data", "math_sample.jsonl")
PROMPT_SUFFIX = "\nPut your final answer in \\boxed{}."


@register
@dataclasses.dataclass(frozen=True)
class MathFileTask(FileSplits, Task):
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
        fractions = check_fractions(self.split_fractions)
        object.__setattr__(self, "split_fractions", fractions)  # a list from a config is fine
        if self.checker == "math_verify" and _math_verify_available():
            # Start the checker processes now (in the background, ~2-3 s), so the first
            # verify call does not pay their start-up inside a training step.
            _get_pool()

    def _data(self) -> tuple[tuple[dict, ...], dict[str, tuple[int, ...]], int]:
        """(records, record indices per split, number skipped), cached per file version."""
        path = os.path.expanduser(self.path) if self.path else SAMPLE_PATH
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size, self.question_field, self.answer_field,
               self.solution_field, self.id_field, self.on_error)  # fmt: skip
        records, skipped = _load(*key)
        return records, _splits(key, self.seed, self.split_fractions), skipped

    def problem(self, index: int, split: str = "train") -> Problem:
        """The `index`-th record of `split` in file order.

        Returns:
          A Problem; metadata: source (path), record (1-based jsonl line or 0-based
          parquet row), key (what the split hashed), has_solution, fields (the
          record's other scalar fields, e.g. level or subject).

        Raises:
          IndexError: `index` is outside [0, num_problems(split)).
        """
        rec = self._record_at(index, split)
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
        pred = strip_wrappers(extract_answer(response) or "")
        if not pred:
            return Verdict(0.0, MALFORMED, None, "no \\boxed{} or 'Answer:' final answer")
        refusal = screen(pred)
        if refusal is not None:
            return Verdict(0.0, MALFORMED, pred[:MAX_ANSWER_CHARS], refusal)
        reason, detail = self.compare(strip_wrappers(str(problem.answer)), pred)
        return Verdict(float(reason == CORRECT), reason, pred, detail)

    def compare(self, gold: str, pred: str) -> tuple[str, str]:
        """(CORRECT / WRONG_ANSWER / TIMEOUT, detail) of the screened answer `pred`
        against `gold`: identical after normalisation, else math-verify (or the exact
        fallback, with a warning once)."""
        if normalise(pred) == normalise(gold):
            return CORRECT, "identical after normalisation"
        if self.checker == "math_verify" and _math_verify_available():
            status, detail = _get_pool().check(gold, pred, self.timeout_s)
            if status != "unavailable":
                reason = {"correct": CORRECT, "wrong": WRONG_ANSWER, "timeout": TIMEOUT}[status]
                return reason, detail
            _warn_fallback(f"math-verify checker processes failed to start ({detail})")
        elif self.checker == "math_verify":
            _warn_fallback("math-verify is not installed (pip install math-verify) or not POSIX")
        return (CORRECT if exact_equal(gold, pred) else WRONG_ANSWER), "exact match"


def answers_equivalent(task: MathFileTask, a: str, b: str) -> bool:
    """Whether two final answers (already extracted) are the same answer under `task`'s
    checker (`MathFileTask.compare`); a refused or timed-out comparison counts as different."""
    a, b = strip_wrappers(a), strip_wrappers(b)
    if not a or not b or screen(a) is not None or screen(b) is not None:
        return False
    return task.compare(a, b)[0] == CORRECT


def start_checker() -> None:
    """Starts the math-verify checker processes now and waits until they are ready."""
    if _math_verify_available():
        _get_pool().wait_ready()


# ---------------------------------------------------------------- loading


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
                        raw = parse_line(line)
                    except BadLine as e:
                        raw = e
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
            try:  # numeric answers / ids such as 72 or 0.5; NaN is no answer
                value = number_text(value, field)
            except BadLine as e:
                raise ValueError(f"{where}: {e}") from e
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{where}: field {field!r} must be a non-empty string")
        return value and value.strip()

    question, answer = text(q_field, True), text(a_field, True)
    if "\\boxed{" in answer:  # some data sets store the gold answer boxed
        boxed = extract_answer(answer)
        answer = answer if boxed is None else boxed.strip()
        if not answer:
            raise ValueError(f"{where}: field {a_field!r} must be a non-empty string")
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
    """`hashed_splits` of the records `_load(*load_key)` reads, once per file version."""
    return hashed_splits([rec["key"] for rec in _load(*load_key)[0]], seed, fractions)


# ---------------------------------------------------------------- fallback
_FALLBACK_WARNED = False


def _warn_fallback(why: str) -> None:
    global _FALLBACK_WARNED
    if not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        logger.warning("math_file: %s; comparing answers by exact normalised match", why)


def _math_verify_available() -> bool:
    # The checker processes need select() on pipes and setitimer: POSIX only.
    return os.name == "posix" and importlib.util.find_spec("math_verify") is not None
