"""Run metrics: a metrics JSONL, tensorboard / W&B scalars and a live console progress line.

  logger = MetricsLogger(workdir)    # backends=("tensorboard",) by default
  logger.truncate(restored_step)           # on resume, before logging anything
  logger.log(step, {"reward": 0.4, "kl": 1e-3})
  logger.progress(step, total_steps, {"reward": 0.4, "step_seconds": 2.1})
  logger.close()

Files in `workdir`: `metrics.jsonl` (one JSON object per `log` call, flushed at
once, so a crash loses nothing already logged; read it with
`rlvr_jax.run.report.read_metrics`) and `tensorboard/` (event files, scalars
named "<split>/<metric>"; tensorboardX turns characters tensorboard does not
allow, like the "@" of "pass@8", into "_"). Non-finite values are written as
JSON `NaN` / `Infinity`, which Python's json module reads back. Other scalar
sinks (`run.backends`: tensorboard, Weights & Biases) open their files at the first
scalar, so a resume that logs nothing leaves no empty event file.

On a TTY the progress line is rewritten in place; a log record (the eval line, a
warning) printed while it is open first ends it, so the two never share a line.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_jax.run.backends import make_backends
from rlvr_jax.run.metrics_file import METRICS_FILE, read_metrics_lines

_RESERVED = ("step", "split", "time")
# (metric key, console label, format) in the order the progress line shows them.
_PROGRESS_KEYS = (
    ("reward", "reward", "{:.2f}"),
    ("pass_rate", "pass", "{:.2f}"),
    ("kl", "kl", "{:.3g}"),
    ("entropy", "ent", "{:.3g}"),
    ("response_len", "len", "{:.0f}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
)


def _as_number(value: Any) -> float | int | None:
    """`value` as a Python int/float if it is a real scalar number, else None."""
    if isinstance(value, bool | str | bytes) or value is None:
        return None
    if isinstance(value, int | float):
        return value
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - anything numpy cannot view is not a number
        return None
    if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.number):
        return None
    if np.issubdtype(arr.dtype, np.integer):
        return int(arr)
    if np.issubdtype(arr.dtype, np.complexfloating):
        return None
    return float(arr)


def format_duration(seconds: float) -> str:
    """'45s', '1m40s', '2h03m' (rounded to whole seconds)."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _format_seconds_per_step(seconds: float) -> str:
    return f"{seconds:.1f} s/step" if seconds >= 1 else f"{seconds:.2f} s/step"


class _EndProgressLine(logging.Filter):
    """Ends an open progress line before a log record is printed (a handler filter)."""

    def __init__(self, logger: MetricsLogger):
        super().__init__()
        self.logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        self.logger.end_line()
        return True


class MetricsLogger:
    """Writes metrics to `metrics.jsonl` and its backends, and prints a progress line.

    With `enabled=False` (the non-zero processes of a multi-host run) every method
    is a no-op and no file or directory is created.
    """

    def __init__(
        self,
        workdir,
        *,
        enabled: bool = True,
        tensorboard: bool = True,
        stream=None,
        progress_every_s: float = 1.0,
        backends: Sequence[str] = ("tensorboard",),
        wandb_project: str = "rlvr_jax",
        wandb_mode: str = "offline",
    ):
        """Opens (appends to) `workdir/metrics.jsonl`; prepares the scalar backends.

        Args:
          workdir: the run directory (created if missing).
          enabled: False makes the logger a no-op.
          tensorboard: False drops "tensorboard" from `backends`.
          stream: where the progress line goes (default sys.stderr).
          progress_every_s: on a non-TTY stream, the least time between two
            printed progress lines (the last step is always printed).
          backends: scalar sinks by name (`run.backends.BACKENDS`).
          wandb_project, wandb_mode: the "wandb" backend's project and mode.
        """
        self.enabled = enabled
        self.workdir = Path(workdir)
        self.path = self.workdir / METRICS_FILE
        self._stream = stream
        self._every_s = progress_every_s
        self._file = None
        self._last_print = -math.inf
        self._line_open = False  # a '\r' progress line without its newline yet
        self._last_len = 0
        self._first_step: tuple[int, float] | None = None  # (step, time) of the first call
        self._backends = []
        self._line_filter: _EndProgressLine | None = None
        self._filtered: list[logging.Handler] = []  # handlers that end the progress line
        self.num_records = 0  # complete records in the file (a checkpoint saves this count)
        if not enabled:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            # Fails now on a corrupt file, not at report time, and drops a line torn
            # by a crash so that the next record does not land on the same line.
            self._rewrite(max_step=None)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        names = tuple(b for b in backends if tensorboard or b != "tensorboard")
        self._backends = make_backends(
            self.workdir, names, wandb_project=wandb_project, wandb_mode=wandb_mode
        )
        self._line_filter = _EndProgressLine(self)

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stderr

    def log(self, step: int, metrics: Mapping[str, Any], *, split: str = "train") -> None:
        """Writes `metrics` at `step`: one JSONL line (flushed) and tensorboard scalars.

        Args:
          step: the training step.
          metrics: name -> value. Real scalars (Python, NumPy or 0-d JAX numbers,
            finite or not) go to both outputs; strings, bools and None only to
            the JSONL; any other value is a TypeError.
          split: "train", "eval", ...; tensorboard tag prefix and the JSONL "split".
        """
        if not self.enabled:
            return
        clash = sorted(set(metrics) & set(_RESERVED))
        if clash:
            raise ValueError(f"metric names {clash} are reserved in {self.path}: {_RESERVED}")
        record: dict[str, Any] = {"step": int(step), "split": split, "time": time.time()}
        scalars = {}
        for name, value in metrics.items():
            number = _as_number(value)
            if number is not None:
                record[name] = number
                scalars[f"{split}/{name}"] = float(number)
            elif isinstance(value, bool | str) or value is None:
                record[name] = value
            else:
                raise TypeError(
                    f"metric {name!r} at step {step} is a {type(value).__name__}; "
                    "log real scalars, strings, bools or None"
                )
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self.num_records += 1
        for backend in self._backends:
            backend.scalars(scalars, int(step))

    def end_line(self) -> None:
        """Ends an open in-place progress line, so that the next output starts a line."""
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False

    def _watch_log_records(self, on: bool) -> None:
        """While a progress line is open, the root logger's handlers end it first."""
        if on and not self._filtered and self._line_filter is not None:
            self._filtered = list(logging.getLogger().handlers)
            for h in self._filtered:
                h.addFilter(self._line_filter)
        elif not on:
            for h in self._filtered:
                h.removeFilter(self._line_filter)
            self._filtered = []

    def progress(self, step: int, total_steps: int, metrics: Mapping[str, Any]) -> None:
        """Shows 'step 12/60 [20%] reward 0.41 ... 2.1 s/step eta 1m40s'.

        On a TTY the line is rewritten in place; otherwise a full line is printed
        at most every `progress_every_s` seconds, and always at the last step.
        Only the known keys present in `metrics` are shown (reward, pass_rate, kl,
        entropy, response_len, tokens_per_s, step_seconds). The ETA uses the mean
        wall time per step since the first `progress` call (so it excludes the
        first step's compilation), or `step_seconds` before two calls are seen.

        Args:
          step: steps done so far.
          total_steps: the run's last step.
          metrics: the latest values.
        """
        if not self.enabled:
            return
        now = time.monotonic()
        if self._first_step is None:
            self._first_step = (step, now)
        first, t0 = self._first_step
        last = step >= total_steps
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if not (tty or last or now - self._last_print >= self._every_s):
            return
        self._last_print = now
        per_step = (now - t0) / (step - first) if step > first else None
        step_s = _as_number(metrics.get("step_seconds"))
        if per_step is None and step_s is not None and math.isfinite(step_s):
            per_step = step_s
        pct = 100.0 * step / total_steps if total_steps else 100.0
        parts = [f"step {step}/{total_steps} [{pct:.0f}%]"]
        for key, label, fmt in _PROGRESS_KEYS:
            value = _as_number(metrics.get(key))
            if value is not None:
                parts.append(f"{label} {fmt.format(value)}")
        if step_s is not None:
            parts.append(_format_seconds_per_step(step_s))
        if per_step is not None and not last:
            parts.append(f"eta {format_duration(per_step * (total_steps - step))}")
        line = " ".join(parts)
        if tty:
            pad = " " * max(0, self._last_len - len(line))  # erase a longer previous line
            self.stream.write("\r" + line + pad + ("\n" if last else ""))
            self._line_open = not last
            self._last_len = len(line)
            self._watch_log_records(not last)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def truncate(self, after_step: int, keep_records: int | None = None) -> None:
        """Drops what was logged after the restored checkpoint.

        That is every record with step > `after_step` and, if `keep_records` is
        given (the count the checkpoint saved), every record past the first
        `keep_records`: e.g. the final evaluation, logged at the last checkpoint's
        step after it was saved, which a rerun logs again. The JSONL is rewritten
        atomically (temporary file + rename); kept lines are copied byte for byte.
        The backends are rewound (tensorboard's next event file carries a purge
        marker, so it hides the old events past `after_step`).

        Args:
          after_step: the step of the checkpoint the run resumes from (-1: none,
            drop everything).
          keep_records: how many records the log held when that checkpoint was saved.
        """
        if not self.enabled:
            return
        self._file.close()
        self._rewrite(max_step=after_step, max_records=keep_records)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        for backend in self._backends:
            backend.rewind(after_step)

    def _rewrite(self, max_step: int | None, max_records: int | None = None) -> None:
        """Atomically rewrites the JSONL with its first `max_records` complete records of
        step <= max_step."""
        lines = read_metrics_lines(self.path) if self.path.is_file() else []
        kept = [line for line, rec in lines if max_step is None or rec["step"] <= max_step]
        kept = kept[:max_records] if max_records is not None else kept
        self.num_records = len(kept)
        data = "".join(line + "\n" for line in kept)
        if not self.path.is_file() or data.encode("utf-8") == self.path.read_bytes():
            return  # nothing to drop: leave the file alone
        tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def close(self) -> None:
        """Ends an open progress line and closes the files (idempotent)."""
        if not self.enabled:
            return
        self.end_line()
        self._watch_log_records(False)
        for backend in self._backends:
            backend.close()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
