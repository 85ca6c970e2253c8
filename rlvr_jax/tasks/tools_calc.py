"""The tool_lookup calculator and number formats: exact, bounded, never evaluates Python.

`calculate` is a bounded recursive-descent parser over exact Fractions (+ - * /
and parentheses); `format_number` writes a value exactly; `parse_number` reads
a final answer. Used by `rlvr_jax.tasks.tools`, which re-exports these names.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import NamedTuple

# Calculator bounds: they keep every call far under a millisecond.
MAX_EXPR_CHARS = 200
MAX_LITERAL_DIGITS = 30
MAX_DEPTH = 20
MAX_MAGNITUDE = 10**60


class CalcResult(NamedTuple):
    """The calculator's outcome: exactly one of `value` and `error` is set."""

    value: Fraction | None
    error: str | None


class _CalcError(Exception):
    pass


_TOKEN_RE = re.compile(r"\s*(?:([0-9]+(?:\.[0-9]+)?)|([-+*/()]))")


def _tokenize(expr: str) -> list[Fraction | str]:
    tokens: list[Fraction | str] = []
    pos, end = 0, len(expr.rstrip())
    while pos < end:
        m = _TOKEN_RE.match(expr, pos)
        if m is None:
            raise _CalcError(f"unexpected character {expr[pos:].lstrip()[:1]!r}")
        number, op = m.groups()
        if number is not None:
            whole, _, frac = number.partition(".")
            if len(whole) + len(frac) > MAX_LITERAL_DIGITS:
                raise _CalcError("number too long")
            tokens.append(Fraction(int(whole + frac), 10 ** len(frac)))
        else:
            tokens.append(op)
        pos = m.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := ('+'|'-') factor | number | '(' expr ')'. Depth-bounded."""

    def __init__(self, tokens: list[Fraction | str]):
        self.tokens, self.pos = tokens, 0

    def peek(self) -> Fraction | str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> Fraction | str | None:
        token = self.peek()
        self.pos += 1
        return token

    def expr(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term(depth)
            value = _bounded(value + rhs if op == "+" else value - rhs)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor(depth)
            if op == "/" and rhs == 0:
                raise _CalcError("division by zero")
            value = _bounded(value * rhs if op == "*" else value / rhs)
        return value

    def factor(self, depth: int) -> Fraction:
        if depth >= MAX_DEPTH:
            raise _CalcError("expression nested too deeply")
        token = self.take()
        if isinstance(token, Fraction):
            return token
        if token in ("+", "-"):
            value = self.factor(depth + 1)
            return -value if token == "-" else value
        if token == "(":
            value = self.expr(depth + 1)
            if self.take() != ")":
                raise _CalcError("unbalanced parentheses")
            return value
        raise _CalcError("expected a number" + ("" if token is None else f", got {token!r}"))


def _bounded(value: Fraction) -> Fraction:
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise _CalcError("number too large")
    return value


def calculate(expr: str) -> CalcResult:
    """Evaluates + - * / and parentheses over integers/decimals exactly; never raises.

    Args:
      expr: the expression text (at most MAX_EXPR_CHARS characters; ASCII digits
        only, literals of at most MAX_LITERAL_DIGITS digits, nesting at most
        MAX_DEPTH, every intermediate value bounded by MAX_MAGNITUDE).
    Returns:
      CalcResult with the exact value, or with an error message.
    """
    if not isinstance(expr, str):
        return CalcResult(None, "expression is not text")
    if len(expr) > MAX_EXPR_CHARS:
        return CalcResult(None, "expression too long")
    try:
        parser = _Parser(_tokenize(expr))
        value = parser.expr(0)
        if parser.peek() is not None:
            raise _CalcError(f"unexpected {parser.peek()!r}")
        return CalcResult(value, None)
    except _CalcError as e:
        return CalcResult(None, str(e))


def format_number(value: Fraction) -> str:
    """Exact text of `value`: an integer, a terminating decimal, or "p/q".

    Args:
      value: a Fraction whose denominator is at most MAX_MAGNITUDE.
    Returns:
      e.g. "489", "-0.075", "1/3".
    """
    if value.denominator == 1:
        return str(value.numerator)
    rest, twos, fives = value.denominator, 0, 0
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)  # the fewest decimal places that make the value exact
    digits = str(abs(value.numerator) * (10**places // value.denominator)).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,40})(?:\.[0-9]{1,40})?")
_RATIO_RE = re.compile(r"[-+]?[0-9]{1,40}/[0-9]{1,40}")


def parse_number(text: str) -> Fraction | None:
    """A final answer's number; ASCII digits only, at most 40 digits per part.

    Args:
      text: the answer text, e.g. "489", "-1,234", "2.5", "7/2" (a final "." is ignored).
    Returns:
      The exact value, or None when the text is not a number.
    """
    text = text.strip().rstrip(".").strip()
    if len(text) > 100:
        return None
    if _RATIO_RE.fullmatch(text):
        num, den = text.split("/")
        return Fraction(int(num), int(den)) if int(den) != 0 else None
    if _NUMBER_RE.fullmatch(text):
        return Fraction(text.replace(",", ""))
    return None
