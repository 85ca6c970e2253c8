"""A one-line progress bar with ETA on stderr that log lines never run into.

On a terminal the bar redraws one line with `\\r`; while it is shown, a filter
on the root logger's handlers clears the line before any log record is
written, and the next update draws it again below the record. Off a terminal
(a file, CI) it writes a plain line at most every 10% so logs stay readable.
"""

from __future__ import annotations

import logging
import sys
import time


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


class _ClearLine(logging.Filter):
    def __init__(self, bar: Progress):
        super().__init__()
        self.bar = bar

    def filter(self, record):
        self.bar.clear()
        return True


class Progress:
    """Counts done units (problems x samples) of `total` and shows rate and ETA.

    Use as a context manager; `advance(units, label)` after each problem. Units
    taken from the cache are counted with `skip(units)` and left out of the rate.
    """

    def __init__(self, total: int, *, stream=None, width: int = 24, label: str = ""):
        self.total, self.width, self.label = max(int(total), 1), width, label
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.skipped = 0
        self._start = time.monotonic()
        self._shown = False
        self._last_decile = -1
        self._filter = _ClearLine(self)

    def __enter__(self):
        if self.tty:
            for h in logging.getLogger().handlers:
                h.addFilter(self._filter)
        return self

    def __exit__(self, *exc):
        if self.tty:
            for h in logging.getLogger().handlers:
                h.removeFilter(self._filter)
            if self._shown:
                self.stream.write("\n")
                self.stream.flush()

    def skip(self, units: int) -> None:
        """Counts `units` already done (from the cache), without timing them."""
        self.done += units
        self.skipped += units
        self._draw()

    def advance(self, units: int, label: str | None = None) -> None:
        """Counts `units` just done; `label` (e.g. the benchmark) replaces the shown label."""
        self.done += units
        if label is not None:
            self.label = label
        self._draw()

    def line(self) -> str:
        """The bar's text: label, bar, done/total, rate and ETA."""
        frac = min(self.done / self.total, 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.monotonic() - self._start
        timed = self.done - self.skipped
        rate = timed / elapsed if elapsed > 0 and timed > 0 else 0.0
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "--:--"
        bar = "#" * filled + "." * (self.width - filled)
        return (
            f"{self.label} [{bar}] {self.done}/{self.total} samples "
            f"{rate:.1f}/s elapsed {_clock(elapsed)} eta {eta}"
        )

    def clear(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()
            self._shown = True
            return
        decile = int(10 * self.done / self.total)
        if decile != self._last_decile:
            self._last_decile = decile
            self.stream.write(self.line() + "\n")
            self.stream.flush()
