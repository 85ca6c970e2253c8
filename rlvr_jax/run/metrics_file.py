"""The run's metrics file: its name and its reader (shared by the logger and the report).

`metrics.jsonl` holds one JSON record per line, each with an integer "step";
`run.logger.MetricsLogger` writes it, `run.report` and the reproduction harness
read it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


def read_metrics_lines(path) -> list[tuple[str, dict[str, Any]]]:
    """(line without its newline, parsed record) for every record of a metrics JSONL.

    Blank lines are skipped. A last line without a newline that does not parse
    is what a process killed mid-write leaves: it is dropped with a warning.

    Args:
      path: the metrics.jsonl file.
    Returns:
      The records in file order. Raises ValueError naming `path:line` on a line
      that is not a JSON object with an integer "step".
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:  # no newline after it: a torn write
                log.warning("%s:%d: dropping an incomplete last line %r", path, i + 1, line)
                continue
            raise ValueError(f"{path}:{i + 1}: not valid JSON ({e.msg}): {line[:200]!r}") from e
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(
                f"{path}:{i + 1}: a metrics record must be a JSON object with an integer "
                f"'step'; got {line[:200]!r}"
            )
        out.append((line, record))
    return out


def read_metrics(path) -> list[dict[str, Any]]:
    """Parses a metrics JSONL (see `read_metrics_lines` for the error handling).

    Args:
      path: the metrics.jsonl file.
    Returns:
      The records ({"step", "split", "time", **metrics}) in file order.
    """
    return [record for _, record in read_metrics_lines(path)]
