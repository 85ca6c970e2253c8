"""Countdown: reach a target from a few numbers with + - * /, plus an exhaustive solver.

Arithmetic is exact (`fractions.Fraction`): any division by a non-zero value is
allowed and intermediate results may be non-integer or negative; only the
target is an integer. Unary minus is not allowed (every literal is one of the
given positive numbers).

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
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar

from rlvr_jax.tasks import register
from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
)

ALL_OPERATORS = "+-*/"
MAX_STORED_SOLUTIONS = 200  # metadata keeps at most this many canonical solutions
MAX_EXPR_CHARS = 200  # longer answers are malformed (no real solution is that long)
MAX_LITERAL_DIGITS = 6
MAX_DEPTH = 32  # parenthesis nesting bound of the parser
_ALIASES = {"×": "*", "÷": "/", "−": "-"}
_FNS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}

# A node is (canonical string, value, kind, first, second): kind "n" is a number
# (first = second = ()); kind "+" holds (added terms, subtracted terms); kind "*"
# holds (multiplied factors, divided factors). Children are sorted by _key.
Node = tuple


def _key(node: Node) -> tuple:
    return (-node[1], node[0])


def _leaf(n: int) -> Node:
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


def _apply(op: str, x: Node, y: Node) -> Node:
    """Canonical node of `x op y`; raises ZeroDivisionError on division by zero."""
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
                node = _apply(op, a, b)
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
                out[str(ms[0])] = _leaf(ms[0])
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
            node = _apply(op, node, sub())
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
            return _leaf(int(tok))
        if tok == "-":
            raise ValueError("unary minus is not allowed")
        raise ValueError("expected a number or '('" if tok is None else f"unexpected {tok!r}")


_TOKEN_RE = re.compile(r"[0-9]+|[-+*/()]")


def _tokenize(expr: str) -> list[str]:
    """Tokens of `expr`; raises ValueError naming the first forbidden character or literal."""
    if len(expr) > MAX_EXPR_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPR_CHARS} characters")
    if "^" in expr or "**" in expr:
        raise ValueError("exponentiation is not allowed")
    expr = "".join(_ALIASES.get(c, c) for c in expr).rstrip().removesuffix(".")
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


def _parse(expr: str) -> Node:
    try:
        return _Parser(_tokenize(expr)).parse()
    except ZeroDivisionError as e:
        raise ValueError("division by zero") from e


def canonical(expr: str) -> str:
    """The canonical string of a valid expression, e.g. "2+(3*1)" -> "3*1+2".

    Raises:
      ValueError: the expression does not parse (or divides by zero).
    """
    return _parse(expr)[0]


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
    _steps(_parse(expr), out)
    return "\n".join(f"{str(a)} {op} {str(b)} = {str(c)}" for a, op, b, c in out)


def entrance_family(expr: str) -> tuple[str, str]:
    """(first operand, operator) of the first step of `expr`'s standard step trace.

    Returns:
      e.g. ("7", "-") for "(7-3)*6"; (number, "") for a bare number (no steps).

    Raises:
      ValueError: the expression does not parse.
    """
    out: list = []
    v = _steps(_parse(expr), out)
    return (str(out[0][0]), out[0][1]) if out else (str(v), "")


_STEP_RE = re.compile(
    r"^[ \t]*(-?[0-9]{1,12}(?:/[0-9]{1,12})?)[ \t]*([-+*/×÷])[ \t]*-?[0-9]{1,12}"
    r"(?:/[0-9]{1,12})?[ \t]*=",
    re.MULTILINE,
)


def trace_family(response: str) -> tuple[str, str] | None:
    """(first operand, operator) of the first "a op b = c" line a response writes.

    Bounded: reads the first 2,000 characters only (the first step is near the start).

    Returns:
      The family, or None when the response has no step line.
    """
    if not isinstance(response, str):
        return None
    m = _STEP_RE.search(response[:2000])
    return (m.group(1), _ALIASES.get(m.group(2), m.group(2))) if m else None


def check_expression(
    expr: str | None, numbers: Sequence[int], target: int, use_all: bool, operators: str
) -> Verdict:
    """Scores one answer expression against a Countdown instance; never raises.

    Returns:
      CORRECT (1.0) when it uses the allowed numbers and operators and equals
      `target`; WRONG_ANSWER for another value; MALFORMED otherwise. `parsed`
      is the canonical form whenever the expression parses.
    """
    if expr is None:
        return Verdict(0.0, MALFORMED, detail="no 'Answer:' line")
    try:
        tokens = _tokenize(expr)
    except ValueError as e:
        return Verdict(0.0, MALFORMED, detail=str(e))
    bad_ops = sorted({t for t in tokens if t in ALL_OPERATORS and t not in operators})
    if bad_ops:
        return Verdict(0.0, MALFORMED, detail=f"operators {bad_ops} not allowed")
    # Check literals before evaluating: this also bounds the arithmetic's size.
    used, have = Counter(int(t) for t in tokens if t.isdigit()), Counter(numbers)
    for n, k in sorted(used.items()):
        if n not in have:
            return Verdict(0.0, MALFORMED, detail=f"{n} is not one of the numbers")
        if k > have[n]:
            return Verdict(0.0, MALFORMED, detail=f"{n} used {k} times, available {have[n]}")
    try:
        node = _Parser(tokens).parse()
    except ZeroDivisionError:
        return Verdict(0.0, MALFORMED, detail="division by zero")
    except ValueError as e:
        return Verdict(0.0, MALFORMED, detail=str(e))
    if use_all and used != have:
        unused = sorted((have - used).elements())
        return Verdict(0.0, MALFORMED, node[0], f"numbers not used: {unused}")
    if node[1] != target:
        return Verdict(0.0, WRONG_ANSWER, node[0], f"value {str(node[1])} != {target}")
    return Verdict(1.0, CORRECT, node[0])


def solution_coverage(responses_or_expressions: Iterable[str], problem: Problem) -> float:
    """Fraction of the problem's distinct canonical solutions found by correct responses.

    Args:
      responses_or_expressions: full responses (their "Answer:" is used) or bare
        expressions (used as they are when no answer line is found).
      problem: a countdown problem (its metadata gives numbers, target, rules).

    Returns:
      |distinct canonical forms of correct items| / num_solutions, in [0, 1].
    """
    m, found = problem.metadata, set()
    for text in responses_or_expressions:
        expr = extract_answer(text)
        expr = text[: MAX_EXPR_CHARS + 1] if expr is None and isinstance(text, str) else expr
        v = check_expression(expr, m["numbers"], m["target"], m["use_all"], m["operators"])
        if v.reason == CORRECT:
            found.add(v.parsed)
    return len(found) / m["num_solutions"] if m["num_solutions"] else 0.0


@register
@dataclasses.dataclass(frozen=True)
class Countdown(Task):
    """Countdown problems with their full canonical solution sets.

    Attributes:
      num_numbers: how many numbers are given (2..6; 6 makes the solver slow).
      min_number, max_number: range of the numbers (inclusive, positive).
      target_min, target_max: range of the integer target (inclusive).
      use_all: each number exactly once if True, at most once if False.
      operators: allowed operators, a subset of "+-*/".
    """

    name: ClassVar[str] = "countdown"
    num_numbers: int = 4
    min_number: int = 1
    max_number: int = 20
    target_min: int = 10
    target_max: int = 100
    use_all: bool = True
    operators: str = ALL_OPERATORS

    def __post_init__(self):
        if not 2 <= self.num_numbers <= 6:
            raise ValueError(f"num_numbers must be in [2, 6], got {self.num_numbers}")
        if not 1 <= self.min_number <= self.max_number < 10**MAX_LITERAL_DIGITS:
            raise ValueError(
                f"need 1 <= min_number <= max_number < 10**{MAX_LITERAL_DIGITS}, got "
                f"{self.min_number}..{self.max_number}"
            )
        if not 1 <= self.target_min <= self.target_max:
            raise ValueError(
                f"need 1 <= target_min <= target_max, got {self.target_min}..{self.target_max}"
            )
        ops = self.operators
        if not isinstance(ops, str) or not ops or len(set(ops)) != len(ops):
            raise ValueError(f"operators must be distinct characters of {ALL_OPERATORS!r}")
        if set(ops) - set(ALL_OPERATORS):
            raise ValueError(f"operators {ops!r} not a subset of {ALL_OPERATORS!r}")
        if not isinstance(self.use_all, bool):
            raise ValueError(f"use_all must be a bool, got {self.use_all!r}")

    def _draw(self, rng) -> tuple[list[int], str]:
        """Numbers and one expression over them whose value is an in-range integer."""
        for _ in range(200):
            numbers = [
                int(x)
                for x in rng.integers(self.min_number, self.max_number + 1, size=self.num_numbers)
            ]
            for _ in range(50):
                node = self._random_expr(rng, numbers)
                if node is not None and node[1].denominator == 1:
                    if self.target_min <= node[1] <= self.target_max:
                        return numbers, node[0]
        raise RuntimeError(f"no reachable target in [{self.target_min}, {self.target_max}]: {self}")

    def _random_expr(self, rng, numbers: list[int]) -> Node | None:
        """Folds random pairs of (a random subset of) `numbers` with random operators."""
        n = len(numbers)
        k = n if self.use_all else int(rng.integers(2, n + 1))
        pool = [_leaf(numbers[i]) for i in rng.permutation(n)[:k]]
        while len(pool) > 1:
            x = pool.pop(int(rng.integers(len(pool))))
            y = pool.pop(int(rng.integers(len(pool))))
            op = self.operators[int(rng.integers(len(self.operators)))]
            if op == "/" and not y[1]:
                return None
            pool.append(_apply(op, x, y))
        return pool[0]

    def problem(self, index: int, split: str = "train") -> Problem:
        numbers, answer = self._draw(self.rng(index, split))
        target = int(_parse(answer)[1])
        sols = solve(numbers, target, use_all=self.use_all, operators=self.operators)
        families = Counter(" ".join(entrance_family(s)) for s in sols)
        ops = " ".join(self.operators)
        rule = "exactly once" if self.use_all else "at most once"
        prompt = (
            f"Numbers: {' '.join(map(str, numbers))}\nTarget: {target}\n"
            f"Use each number {rule} with {ops}. Show steps, then write Answer: <expression>"
        )
        metadata = {
            "numbers": numbers,
            "target": target,
            "use_all": self.use_all,
            "operators": self.operators,
            "num_solutions": len(sols),
            "solutions": sols[:MAX_STORED_SOLUTIONS],
            "solutions_truncated": len(sols) > MAX_STORED_SOLUTIONS,
            "entrance_families": dict(sorted(families.items(), key=lambda kv: (-kv[1], kv[0]))),
            "entrance_family": list(entrance_family(answer)),
            "difficulty": 1.0 / len(sols),
        }
        solution = f"{step_trace(answer)}\nAnswer: {answer}".lstrip("\n")
        return Problem(self.problem_id(index, split), prompt, answer, solution, metadata)

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Scores the expression on the response's last "Answer:" line (see check_expression)."""
        m = problem.metadata
        return check_expression(
            extract_answer(response), m["numbers"], m["target"], m["use_all"], m["operators"]
        )
