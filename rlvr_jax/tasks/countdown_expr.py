"""Countdown expressions: canonical forms, the exhaustive solver, step traces, entrance families.

Canonical form. Expressions that differ only by commutativity or associativity
map to one string. `+`/`-` form one n-ary node holding a multiset of added and a
multiset of subtracted terms, and `*`/`/` likewise hold multiplied and divided
factors, so a-(b-c) == a+c-b and a/(b/c) == a*c/b. Terms are sorted by value,
largest first (ties by string), added before subtracted: "8*3+2-1", "6*(7-3)".
Distributivity and identities are not merged (x*1 and x/1 stay distinct).

Step trace and entrance family. A canonical expression is written as steps
"a op b = c" in post-order of the left-deep tree its string parses to (each
term's own steps, then the step folding it into the running value); for + and
* the larger operand is written first. The entrance family of a solution is
(first operand, operator) of its first step, e.g. "6*(7-3)" -> ("7", "-").

Solver complexity. Before deduplication there are k!·Catalan(k-1)·4^(k-1)
expressions over k numbers (4: 7,680; 5: 430,080; 6: 31M). `solve` memoises the
distinct canonical expressions of every proper sub-multiset and combines the
two sides of each split, keeping only target-valued results at the top, so the
full set's expressions are never stored: ~25 ms for 4 numbers, ~1 s for 5, tens
of seconds for 6.

Used by `rlvr_jax.tasks.countdown`, which re-exports the public names.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction

ALL_OPERATORS = "+-*/"
MAX_EXPR_CHARS = 200  # longer answers are malformed (no real solution is that long)
MAX_LITERAL_DIGITS = 6
MAX_DEPTH = 32  # parenthesis nesting bound of the parser
ALIASES = {"×": "*", "÷": "/", "−": "-"}  # operator characters read as + - * /
_FNS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}

# A node is (canonical string, value, kind, first, second): kind "n" is a number
# (first = second = ()); kind "+" holds (added terms, subtracted terms); kind "*"
# holds (multiplied factors, divided factors). Children are sorted by _key.
Node = tuple


def _key(node: Node) -> tuple:
    return (-node[1], node[0])


def leaf(n: int) -> Node:
    """The node of the number `n`.

    Args:
      n: a given number.
    Returns:
      (str(n), Fraction(n), "n", (), ()).
    """
    return (str(n), Fraction(n), "n", (), ())


def _parts(node: Node, kind: str) -> tuple[tuple, tuple]:
    """The node's (positive, negative) children when flattened into a `kind` chain."""
    return (node[3], node[4]) if node[2] == kind else ((node,), ())


def _build(kind: str, pos: Iterable[Node], neg: Iterable[Node], value: Fraction) -> Node:
    pos, neg = tuple(sorted(pos, key=_key)), tuple(sorted(neg, key=_key))
    if kind == "+":
        text = "+".join(t[0] for t in pos) + "".join("-" + t[0] for t in neg)
    else:  # a sum inside a product is the only place that needs parentheses
        wrap = [f"({f[0]})" if f[2] == "+" else f[0] for f in pos + neg]
        text = "*".join(wrap[: len(pos)]) + "".join("/" + w for w in wrap[len(pos) :])
    return (text, value, kind, pos, neg)


def apply(op: str, x: Node, y: Node) -> Node:
    """Canonical node of `x op y`.

    Args:
      op: one of "+-*/".
      x, y: the operand nodes.
    Returns:
      The node, its children merged into one chain where `op` continues theirs.
    Raises:
      ZeroDivisionError: division by a zero-valued `y`.
    """
    kind = "+" if op in "+-" else "*"
    (xp, xn), (yp, yn) = _parts(x, kind), _parts(y, kind)
    if op in "-/":  # subtracting (dividing by) y swaps y's added and subtracted sides
        yp, yn = yn, yp
    return _build(kind, xp + yp, xn + yn, _FNS[op](x[1], y[1]))


def _sub_multisets(items: tuple[int, ...]):
    """Yields (part, rest) for every split of a sorted multiset into two non-empty parts."""
    counts = sorted(Counter(items).items())
    for take in itertools.product(*(range(c + 1) for _, c in counts)):
        part = tuple(v for (v, _), k in zip(counts, take, strict=True) for _ in range(k))
        rest = tuple(v for (v, c), k in zip(counts, take, strict=True) for _ in range(c - k))
        if part and rest and part <= rest:  # unordered: each split once
            yield part, rest


def _combine(left, right, operators: str, target: Fraction | None, out: dict) -> None:
    """Adds to `out` every `x op y` (both orders for - and /) with value == target if given."""
    ordered = [(op, s) for op in operators for s in ((False, True) if op in "-/" else (False,))]
    for x in left:
        for y in right:
            for op, swap in ordered:
                a, b = (y, x) if swap else (x, y)
                if op == "/" and not b[1]:
                    continue
                if target is not None and _FNS[op](a[1], b[1]) != target:
                    continue
                node = apply(op, a, b)
                out.setdefault(node[0], node)


def solve(
    numbers: Sequence[int], target: int, *, use_all: bool = True, operators: str = ALL_OPERATORS
) -> list[str]:
    """Every solution up to commutativity/associativity, as sorted canonical strings.

    Args:
      numbers: the available positive integers (a multiset).
      target: the integer to reach.
      use_all: each number exactly once if True, at most once if False.
      operators: allowed subset of "+-*/".

    Returns:
      The sorted unique canonical expressions whose value equals `target`.
    """
    goal, memo = Fraction(target), {}

    def exprs(ms: tuple[int, ...]) -> list[Node]:
        # All distinct canonical expressions using exactly the multiset `ms`.
        if ms not in memo:
            out: dict[str, Node] = {}
            if len(ms) == 1:
                out[str(ms[0])] = leaf(ms[0])
            for part, rest in _sub_multisets(ms):
                _combine(exprs(part), exprs(rest), operators, None, out)
            memo[ms] = list(out.values())
        return memo[ms]

    def hits(ms: tuple[int, ...]) -> Iterable[str]:
        if len(ms) == 1:
            return [str(ms[0])] if ms[0] == goal else []
        out: dict[str, Node] = {}
        for part, rest in _sub_multisets(ms):
            _combine(exprs(part), exprs(rest), operators, goal, out)
        return out

    full = tuple(sorted(int(n) for n in numbers))
    subsets = {full}
    if not use_all:
        for k in range(1, len(full)):
            subsets.update(itertools.combinations(full, k))
    return sorted({s for ms in subsets for s in hits(ms)})


class _Parser:
    """Bounded recursive descent over integer literals, + - * / and parentheses."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.i, self.depth = tokens, 0, 0

    def parse(self) -> Node:
        node = self.expr()
        if self.i != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.i]!r}")
        return node

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def expr(self, ops: str = "+-") -> Node:
        # Left-associative chains: + - over terms, * / over factors.
        sub = (lambda: self.expr("*/")) if ops == "+-" else self.factor
        node = sub()
        while (op := self.peek()) is not None and op in ops:
            self.i += 1
            node = apply(op, node, sub())
        return node

    def factor(self) -> Node:
        tok = self.peek()
        self.i += 1
        if tok == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ValueError("parentheses nested too deeply")
            node = self.expr()
            if self.peek() != ")":
                raise ValueError("unbalanced parentheses")
            self.i += 1
            self.depth -= 1
            return node
        if tok is not None and tok.isascii() and tok.isdigit():
            return leaf(int(tok))
        if tok == "-":
            raise ValueError("unary minus is not allowed")
        raise ValueError("expected a number or '('" if tok is None else f"unexpected {tok!r}")


_TOKEN_RE = re.compile(r"[0-9]+|[-+*/()]")


def tokenize(expr: str) -> list[str]:
    """Tokens of an answer expression: integer literals, + - * / and parentheses.

    Args:
      expr: the expression text (× ÷ − read as * / -; a final "." is ignored).
    Returns:
      The tokens.
    Raises:
      ValueError: naming the first forbidden character or over-long literal.
    """
    if len(expr) > MAX_EXPR_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPR_CHARS} characters")
    if "^" in expr or "**" in expr:
        raise ValueError("exponentiation is not allowed")
    expr = "".join(ALIASES.get(c, c) for c in expr).rstrip().removesuffix(".")
    bad = next((c for c in expr if c not in "0123456789+-*/() \t"), None)
    if bad is not None:
        kind = "non-ASCII digit" if bad.isdigit() or bad.isnumeric() else "character"
        raise ValueError(f"forbidden {kind} {bad!r}")
    tokens = _TOKEN_RE.findall(expr)
    if not tokens:
        raise ValueError("empty expression")
    if any(len(t) > MAX_LITERAL_DIGITS for t in tokens):
        raise ValueError(f"number literal longer than {MAX_LITERAL_DIGITS} digits")
    return tokens


def parse_tokens(tokens: list[str]) -> Node:
    """The canonical node of tokenized expression (bounded nesting).

    Args:
      tokens: from `tokenize`.
    Returns:
      The root node.
    Raises:
      ValueError: a syntax error; ZeroDivisionError: division by zero.
    """
    return _Parser(tokens).parse()


def parse(expr: str) -> Node:
    """The canonical node of an expression.

    Args:
      expr: the expression text.
    Returns:
      The root node (canonical string, exact value, kind, children).
    Raises:
      ValueError: the expression does not parse, or divides by zero.
    """
    try:
        return parse_tokens(tokenize(expr))
    except ZeroDivisionError as e:
        raise ValueError("division by zero") from e


def canonical(expr: str) -> str:
    """The canonical string of a valid expression, e.g. "2+(3*1)" -> "3*1+2".

    Raises:
      ValueError: the expression does not parse (or divides by zero).
    """
    return parse(expr)[0]


def _steps(node: Node, out: list[tuple[Fraction, str, Fraction, Fraction]]) -> Fraction:
    """Appends node's steps (a, op, b, c) in post-order; returns its value."""
    if node[2] == "n":
        return node[1]
    ops = ("+", "-") if node[2] == "+" else ("*", "/")
    items = [(ops[0], t) for t in node[3]] + [(ops[1], t) for t in node[4]]
    acc = _steps(items[0][1], out)
    for op, term in items[1:]:
        b = _steps(term, out)
        a, b = (max(acc, b), min(acc, b)) if op in "+*" else (acc, b)
        acc = _FNS[op](a, b)
        out.append((a, op, b, acc))
    return acc


def step_trace(expr: str) -> str:
    """The standard step trace of `expr`'s canonical form: lines "a op b = c".

    Raises:
      ValueError: the expression does not parse.
    """
    out: list = []
    _steps(parse(expr), out)
    return "\n".join(f"{str(a)} {op} {str(b)} = {str(c)}" for a, op, b, c in out)


def entrance_family(expr: str) -> tuple[str, str]:
    """(first operand, operator) of the first step of `expr`'s standard step trace.

    Returns:
      e.g. ("7", "-") for "(7-3)*6"; (number, "") for a bare number (no steps).

    Raises:
      ValueError: the expression does not parse.
    """
    out: list = []
    v = _steps(parse(expr), out)
    return (str(out[0][0]), out[0][1]) if out else (str(v), "")
