"""Rows of a benchmark's downloaded files, each with where it came from.

The Hugging Face releases of the paper benchmarks come as parquet, jsonl, json
(one list of objects) or csv. `read_rows` yields every row with its location
("line 7" of a jsonl, "row 3" of parquet/csv/json) so that a malformed row
fails with the file, line and field named (`BadRow`), or is skipped and counted
with `on_bad_row="skip"`.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlvr_jax.tasks.jsonl import BadLine, number_text, parse_line

logger = logging.getLogger(__name__)

SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".json", ".csv")
ON_BAD_ROW = ("raise", "skip")


class BadRow(ValueError):
    """A row that cannot become a benchmark item; the message names file, row and field."""


def read_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """Yields (location, raw row) for every row of `path`; a row unreadable as JSON is a BadLine.

    Args:
      path: a .parquet, .jsonl/.ndjson, .json (list of objects, or {"data": [...]}) or .csv file.
    Yields:
      ("line N" (1-based) for jsonl, "row N" (0-based) otherwise, the row's dict or
      the BadLine saying why the line is not JSON).
    """
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # optional dependency, only for parquet files

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"row {i}", row
    elif suffix in (".jsonl", ".ndjson"):
        with open(path, "rb") as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        yield f"line {line_no}", parse_line(line)
                    except BadLine as e:
                        yield f"line {line_no}", e
    elif suffix == ".json":
        try:
            data = parse_line(path.read_bytes())
        except BadLine as e:
            raise BadRow(f"{path}: {e}") from e
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise BadRow(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        for i, row in enumerate(data):
            yield f"row {i}", row
    elif suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            for i, row in enumerate(csv.DictReader(f)):
                yield f"row {i}", row
    else:
        raise BadRow(f"{path}: unsupported file type; valid: {', '.join(SUFFIXES)}")


def load_items(
    paths: list[Path],
    to_item: Callable[[dict, str], Any],
    *,
    on_bad_row: str = "raise",
) -> tuple[list, int]:
    """Maps every row of `paths` through `to_item(row, where)`.

    Args:
      paths: files to read, in order.
      to_item: builds one item from (raw row dict, "<file name>:<line N / row N>");
        raises BadRow (message without the location, which is prefixed here) for a
        malformed row; any other ValueError/TypeError/KeyError is reported the same way.
      on_bad_row: "raise" on the first malformed row, or "skip" it; skipped rows are
        counted and the count and first reason are logged as a warning.
    Returns:
      (items, number of rows skipped). Raises BadRow naming the file when no row is
      usable.
    """
    if on_bad_row not in ON_BAD_ROW:
        raise ValueError(f"on_bad_row must be one of {ON_BAD_ROW}, got {on_bad_row!r}")
    items, errors, total = [], [], 0
    for path in paths:
        for where, raw in read_rows(path):
            total += 1
            try:
                if isinstance(raw, Exception):
                    raise BadRow(str(raw))
                if not isinstance(raw, dict):
                    raise BadRow(f"expected an object, got {type(raw).__name__}")
                items.append(to_item(raw, f"{path.name}:{where}"))
            except (BadRow, ValueError, TypeError, KeyError) as e:
                why = str(e) if isinstance(e, BadRow) else f"{type(e).__name__}: {e}"
                error = BadRow(f"{path}, {where}: {why}")
                if on_bad_row == "raise":
                    raise error from e
                errors.append(str(error))
    if errors:
        logger.warning(
            "skipped %d malformed rows of %d (on_bad_row='skip'); first: %s",
            len(errors), total, errors[0],
        )  # fmt: skip
    if not items:
        names = ", ".join(str(p) for p in paths)
        raise BadRow(f"{names}: no usable rows ({total} read, {len(errors)} malformed)")
    return items, len(errors)


def field(row: dict, names: tuple[str, ...], *, required: bool = True) -> Any:
    """The value of the first of `names` that `row` has (a release's field name, or an alias).

    Raises:
      BadRow naming the expected field(s) and the fields the row has, when none is
      present (or all are None) and `required`.
    """
    for name in names:
        if row.get(name) is not None:
            return row[name]
    if required:
        want = " or ".join(repr(n) for n in names)
        raise BadRow(f"missing field {want} (has {sorted(row)[:20]})")
    return None


def text_field(row: dict, names: tuple[str, ...], *, required: bool = True) -> str | None:
    """`field` as a non-empty stripped string; numbers (an AIME answer 204) become text.

    Raises:
      BadRow naming the field when the value is not a string or number, or is empty.
    """
    value = field(row, names, required=required)
    if value is None:
        return None
    name = next(n for n in names if row.get(n) is not None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            value = number_text(value, name)
        except BadLine as e:
            raise BadRow(str(e)) from e
        if value.endswith(".0"):  # parquet/csv may store an integer answer as 72.0
            value = value[:-2]
    if not isinstance(value, str):
        raise BadRow(f"field {name!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        if not required:  # an optional field left empty (LiveCodeBench's starter_code "")
            return None
        raise BadRow(f"field {name!r} is empty")
    return value.strip()


def json_field(row: dict, names: tuple[str, ...]) -> Any:
    """`field`, parsed from JSON when the release stores it as a JSON string.

    Raises:
      BadRow naming the field when a string value is not valid JSON.
    """
    value = field(row, names)
    if isinstance(value, str):
        name = next(n for n in names if row.get(n) is not None)
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise BadRow(f"field {name!r} is not valid JSON ({e.msg})") from e
    return value
