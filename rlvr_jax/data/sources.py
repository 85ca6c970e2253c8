"""Random-access prompt sources: a task's generated problems, or records read from jsonl files.

Every source is a grain random-access data source (`__len__`, `__getitem__`)
whose records are flat dicts of plain Python values with the same keys
(`RECORD_FIELDS`):

  index     int: position of the record in its source (0-based).
  id        str: stable identifier (task problem id, or "<file name>:<line>").
  prompt    str: the text shown to the policy.
  answer    str: the reference final answer.
  solution  str: a reference solution ("" when the source has none).
  metadata  str: a JSON object with everything else.

Metadata travels as a JSON string rather than a nested dict so records are
cheap to pickle (grain worker processes) and batch into flat tuples, and so a
record never holds objects a checkpoint or a log cannot write. The price is
that JSON turns tuples into lists; `PromptBatch.problems` decodes it again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlvr_jax.tasks.base import SPLITS, Task
from rlvr_jax.tasks.jsonl import BadLine, number_text, parse_line

RECORD_FIELDS = ("index", "id", "prompt", "answer", "solution", "metadata")
ON_ERROR = ("raise", "skip")
# How many skipped-record reasons the warning quotes; the count is always complete.
_MAX_REASONS_LOGGED = 5

_log = logging.getLogger(__name__)


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Serialises problem metadata to a canonical JSON object string.

    Args:
      metadata: the problem's metadata; values may be JSON types, tuples or
        NumPy scalars/arrays (converted to lists and Python numbers).

    Returns:
      A JSON object string with sorted keys, so equal metadata gives equal strings.

    Raises:
      TypeError: a value has no JSON form (the message names its type).
    """
    return json.dumps(dict(metadata), sort_keys=True, default=_to_json, ensure_ascii=False)


def _to_json(value: Any) -> Any:
    # Tasks build metadata with NumPy generators, so NumPy numbers are expected;
    # anything else is a bug in the task and must not be stringified silently.
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON-serialisable")


class TaskSource:
    """The first `size` problems of a task split, as a grain random-access source.

    Problems are generated on access (tasks are deterministic in
    (options, seed, split, index)), so the source holds no data and pickles
    as small as the task's options.

    Attributes:
      task: the task that generates the problems.
      split: one of "train", "validation", "test".
      size: number of problems (indices 0..size-1).
    """

    def __init__(self, task: Task, split: str = "train", size: int = 1024):
        """Builds the source.

        Args:
          task: a task from `rlvr_jax.tasks.get`.
          split: the task split to draw problems from.
          size: how many problems the source exposes; must be positive.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {SPLITS}")
        if size <= 0:
            raise ValueError(f"TaskSource size must be positive, got {size}")
        self.task = task
        self.split = split
        self.size = int(size)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The record of problem `index` of the split.

        Args:
          index: in [0, size).

        Returns:
          A dict with the keys of RECORD_FIELDS.
        """
        index = int(index)
        if not 0 <= index < self.size:
            raise IndexError(f"TaskSource index {index} out of range [0, {self.size})")
        problem = self.task.problem(index, self.split)
        try:
            metadata = metadata_json(problem.metadata)
        except TypeError as err:
            raise TypeError(f"problem {problem.id}: {err}") from err
        return {
            "index": index,
            "id": problem.id,
            "prompt": problem.prompt,
            "answer": problem.answer,
            "solution": problem.solution,
            "metadata": metadata,
        }

    def __repr__(self) -> str:
        return f"TaskSource({self.task!r}, split={self.split!r}, size={self.size})"


class JsonlSource:
    """Records from one or more jsonl files (one JSON object per line), in file order.

    Each line is parsed and validated when the source is built, so a malformed
    record fails fast with its location instead of midway through training.
    Blank lines are not records and are ignored. Fields not mapped to prompt,
    answer, id or solution go to the record's metadata.

    Attributes:
      paths: the files read, in order.
      num_skipped: malformed records skipped (always 0 with on_error="raise").
      skipped: ("<path>, line <n>", reason) for every skipped record.
    """

    def __init__(
        self,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        prompt_field: str = "prompt",
        answer_field: str = "answer",
        id_field: str | None = None,
        solution_field: str | None = None,
        on_error: str = "raise",
    ):
        """Reads and validates every record.

        Args:
          paths: a jsonl file or a sequence of them (records are concatenated).
          prompt_field: key of the prompt text in each object (required, a
            non-empty string).
          answer_field: key of the reference answer (required; a non-empty string
            or a finite number, which is converted with str(); NaN is malformed).
          id_field: key of a record id (required when given); None makes ids
            "<file name>:<line>".
          solution_field: key of a reference solution (required when given);
            None makes every solution "".
          on_error: "raise" raises ValueError at the first malformed record;
            "skip" drops malformed records, counts them in `num_skipped` and logs
            the total with logging.warning.

        Raises:
          ValueError: a malformed record (message names the file and the
            1-based line): not a JSON object (including lines json cannot parse:
            nested too deeply, integers past Python's digit limit), a missing,
            empty or non-finite field; no records at all; an unknown on_error.
        """
        if on_error not in ON_ERROR:
            raise ValueError(f"unknown on_error {on_error!r}; valid: {ON_ERROR}")
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = tuple(os.fspath(p) for p in paths)
        self._fields = {
            "prompt": prompt_field,
            "answer": answer_field,
            "id": id_field,
            "solution": solution_field,
        }
        self._records: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []
        for path in self.paths:
            self._read(path, on_error)
        self.num_skipped = len(self.skipped)
        if self.skipped:
            # Skipping is opt-in but never silent: one warning with the total per source.
            reasons = "; ".join(f"{where}: {why}" for where, why in self.skipped)
            if self.num_skipped > _MAX_REASONS_LOGGED:
                first = self.skipped[:_MAX_REASONS_LOGGED]
                reasons = "; ".join(f"{where}: {why}" for where, why in first) + "; ..."
            _log.warning(
                "JsonlSource skipped %d malformed records in %s (%s)",
                self.num_skipped,
                ", ".join(self.paths),
                reasons,
            )
        if not self._records:
            raise ValueError(f"no valid records in {', '.join(self.paths)}")

    def _read(self, path: str, on_error: str) -> None:
        # Binary read so an undecodable line is a malformed record with a line
        # number, not a UnicodeDecodeError for the whole file.
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    record = self._parse(raw, path, lineno)
                except _MalformedRecord as err:
                    where = f"{path}, line {lineno}"
                    if on_error == "raise":
                        raise ValueError(f"{where}: {err}") from err.__cause__
                    self.skipped.append((where, str(err)))
                    continue
                record["index"] = len(self._records)
                self._records.append(record)

    def _parse(self, raw: bytes, path: str, lineno: int) -> dict[str, Any]:
        try:
            obj = parse_line(raw)
        except BadLine as err:
            raise _MalformedRecord(str(err)) from err
        if not isinstance(obj, dict):
            raise _MalformedRecord(f"expected a JSON object, got {type(obj).__name__}")
        record = {
            "prompt": _text(obj, self._fields["prompt"], numbers=False),
            "answer": _text(obj, self._fields["answer"], numbers=True),
        }
        if self._fields["id"] is None:
            record["id"] = f"{os.path.basename(path)}:{lineno}"
        else:
            record["id"] = _text(obj, self._fields["id"], numbers=True)
        if self._fields["solution"] is None:
            record["solution"] = ""
        else:
            record["solution"] = _text(obj, self._fields["solution"], numbers=False, empty=True)
        mapped = {name for name in self._fields.values() if name is not None}
        record["metadata"] = metadata_json({k: v for k, v in obj.items() if k not in mapped})
        return record

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The record at `index` (a copy, so callers cannot alter the source).

        Args:
          index: in [0, len(self)).

        Returns:
          A dict with the keys of RECORD_FIELDS.
        """
        return dict(self._records[int(index)])

    def __repr__(self) -> str:
        return f"JsonlSource({list(self.paths)!r}, records={len(self)})"


class _MalformedRecord(Exception):
    """A record-level problem; the reader adds the file and line."""


def _text(obj: dict[str, Any], field: str, *, numbers: bool, empty: bool = False) -> str:
    """`obj[field]` as a string (non-empty unless `empty`); finite numbers only where asked."""
    if field not in obj:
        raise _MalformedRecord(f"missing field {field!r} (has {sorted(obj)})")
    value = obj[field]
    if isinstance(value, str):
        if not (empty or value.strip()):
            raise _MalformedRecord(f"field {field!r} is empty")
        return value
    # bool is an int subclass, but "True" is never a meaningful answer or id.
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return number_text(value, field)
        except BadLine as err:
            raise _MalformedRecord(str(err)) from err
    kind = "a string or a number" if numbers else "a string"
    raise _MalformedRecord(f"field {field!r} must be {kind}, got {type(value).__name__}")
