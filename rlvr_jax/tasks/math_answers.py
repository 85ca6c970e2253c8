"""Final answers of real math data: unwrapping, a linear-time screen and exact comparison.

`screen` refuses (MALFORMED) answers that would make a symbolic checker slow or
huge before any parsing: over-long text, control characters, non-ASCII digits,
unbalanced braces, deep nesting, power towers, huge exponents and factorials.
`normalise` and `exact_equal` are the comparison used when math-verify is not
available. Used by `rlvr_jax.tasks.math_data`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

MAX_ANSWER_CHARS = 300  # longer final answers are MALFORMED before any parsing
MAX_DEPTH = 20  # bracket nesting depth of an answer
MAX_EXPONENT = 10_000  # largest value of an exponent (itself estimated, for nested powers)
MAX_POWER_DIGITS = 100_000  # most digits of a power with a numeric base

_SPACING = re.compile(r"\\(?:left|right|displaystyle)\b|\\[!,;: ]|\s+")
_RATIONAL = re.compile(r"(-?)(?:\\frac\{(\d{1,60})\}\{(\d{1,60})\}|(\d{1,60})/(\d{1,60}))")
_DECIMAL = re.compile(r"-?\d{1,60}(?:\.\d{1,60})?")


def strip_wrappers(answer: str) -> str:
    """Removes $...$, \\(...\\), **bold** and a trailing period around a final answer.

    Args:
      answer: an extracted final answer (only its first 4 * MAX_ANSWER_CHARS are read).
    Returns:
      The unwrapped answer text.
    """
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


def screen(answer: str) -> str | None:
    """Why `answer` is refused before parsing (MALFORMED), or None. Linear time.

    Args:
      answer: an unwrapped final answer.
    Returns:
      The reason text, or None when the answer may be parsed.
    """
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


def normalise(answer: str) -> str:
    """Spacing-insensitive form of a LaTeX answer for string comparison.

    Args:
      answer: LaTeX answer text.
    Returns:
      The text without spacing commands, whitespace and a final period; \\dfrac and
      \\tfrac written as \\frac.
    """
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


def exact_equal(gold: str, pred: str) -> bool:
    """The fallback comparison: equal normalised strings or equal simple rationals.

    Args:
      gold, pred: the unwrapped reference and predicted answers.
    Returns:
      Whether they are equal.
    """
    g, p = normalise(gold), normalise(pred)
    return g == p or (_as_fraction(g) is not None and _as_fraction(g) == _as_fraction(p))
