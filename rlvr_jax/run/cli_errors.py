"""One-line messages for the errors a command line meets: a mistyped or invalid config flag.

`rlvr_jax.main` prints `describe(err, argv)` and exits 2 instead of a traceback.
ml_collections reports a missing field as an AttributeError wrapping a KeyError
whose text is "'lrr'\\nDid you mean \\"lr\\" instead of \\"lrr\\"?"; absl wraps a value it
cannot parse in a flags.Error. Pure string work: nothing of JAX is imported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_SUGGESTION = re.compile(r'Did you mean "([^"]+)" instead of "([^"]+)"\?')


def _innermost_text(err: BaseException) -> str:
    """The message of `err`, unwrapped from exceptions that carry an exception."""
    seen = 0
    while err.args and isinstance(err.args[0], BaseException) and seen < 10:
        err, seen = err.args[0], seen + 1
    if isinstance(err, KeyError) and err.args:  # KeyError's str() is the repr of its key
        return str(err.args[0])
    return str(err)


def _config_flag(argv: Sequence[str], key: str) -> str | None:
    """The `--config.a.b=v` item of `argv` whose field path contains `key`."""
    for item in argv:
        if item.startswith("--config."):
            path = item[len("--config.") :].split("=", 1)[0]
            if key in path.split("."):
                return item
    return None


def describe(err: BaseException, argv: Sequence[str]) -> str:
    """One line naming the flag, the field and what is allowed (or a suggestion).

    Args:
      err: the exception of flag parsing or of the config's validation.
      argv: the command line (to name the flag that caused it).
    Returns:
      e.g. "--config.optimizer.lrr=1: config field 'lrr' does not exist; did you mean
      'lr'?" or the error's own message on one line.
    """
    text = _innermost_text(err).strip()
    key_match = re.match(r"^'([^']+)'", text)
    if isinstance(err, AttributeError | KeyError) and key_match:
        key = key_match.group(1)
        flag = _config_flag(argv, key)
        msg = f"config field {key!r} does not exist"
        if flag:
            path = flag[len("--config.") :].split("=", 1)[0].split(".")
            where = ".".join(["config", *path[: path.index(key)]])
            msg = f"{flag}: {where} has no field {key!r}"
        suggestion = _SUGGESTION.search(text)
        if suggestion:
            msg += f"; did you mean {suggestion.group(1)!r}?"
        return msg
    if "Failed loading config file" in text:  # ml_collections lists the paths it tried
        return "--config: " + [line for line in text.splitlines() if line.strip()][-1].strip()
    if "Traceback (most recent call last)" in text:  # absl quotes the config file's error
        head = text.split("Traceback (most recent call last)", 1)[0].rstrip(" :\n")
        last = [line for line in text.splitlines() if line.strip()][-1].strip()
        text = f"{head}: {last}"
    return " ".join(text.split())  # one line
