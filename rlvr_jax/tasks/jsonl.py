"""One jsonl line as a Python object, with every way a line can fail named.

`json.loads` fails in three ways that are not `JSONDecodeError`: undecodable
bytes (UnicodeDecodeError), nesting deeper than the interpreter's recursion
limit (RecursionError) and integers longer than Python's digit limit
(ValueError). It also accepts `NaN` and `Infinity`. The readers of jsonl data
(`data.sources.JsonlSource`, the `math_file` task) turn each of these into one
malformed record with its file and line, which `on_error="skip"` then skips.
"""

from __future__ import annotations

import json
import math
from typing import Any


class BadLine(ValueError):
    """A line that is not one usable JSON value; the reader adds the file and line."""


def parse_line(raw: bytes) -> Any:
    """The JSON value of one line; BadLine (a ValueError) saying why it is not one."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise BadLine(f"not UTF-8 ({err.reason})") from err
    except json.JSONDecodeError as err:
        raise BadLine(f"invalid JSON ({err.msg}, column {err.colno})") from err
    except RecursionError as err:
        raise BadLine("invalid JSON (nested too deeply)") from err
    except ValueError as err:  # e.g. an integer past sys.get_int_max_str_digits()
        raise BadLine(f"invalid JSON ({err})") from err


def number_text(value: int | float, field: str) -> str:
    """A JSON number as text; BadLine for NaN and ±Infinity, which are no answer or id."""
    if isinstance(value, float) and not math.isfinite(value):
        raise BadLine(f"field {field!r} is {value}, not a finite number")
    return str(value)
