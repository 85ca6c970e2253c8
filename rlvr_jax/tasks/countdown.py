"""Countdown: reach a target from a few numbers with + - * /, plus an exhaustive solver.

Arithmetic is exact (`fractions.Fraction`): any division by a non-zero value is
allowed and intermediate results may be non-integer or negative; only the
target is an integer. Unary minus is not allowed (every literal is one of the
given positive numbers).


Canonical forms, the exhaustive solver, step traces and entrance families live
in `countdown_expr` (re-exported here).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
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

# Re-exported: the public names of the expression module.
from rlvr_jax.tasks.countdown_expr import (  # noqa: F401
    ALIASES,
    ALL_OPERATORS,
    MAX_DEPTH,
    MAX_EXPR_CHARS,
    MAX_LITERAL_DIGITS,
    Node,
    apply,
    canonical,
    entrance_family,
    leaf,
    parse,
    parse_tokens,
    solve,
    step_trace,
    tokenize,
)

MAX_STORED_SOLUTIONS = 200  # metadata keeps at most this many canonical solutions

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
    return (m.group(1), ALIASES.get(m.group(2), m.group(2))) if m else None


def first_operator_span(response: str) -> tuple[int, int] | None:
    """Character span of the operator of the first "a op b = c" line (as `trace_family`).

    Returns:
      (start, end) offsets into `response`, or None when it has no step line in
      its first 2,000 characters.
    """
    if not isinstance(response, str):
        return None
    m = _STEP_RE.search(response[:2000])
    return m.span(2) if m else None


def family_entropy(families: Iterable[tuple[str, str] | None]) -> float:
    """Entropy (nats) of the empirical distribution of entrance families.

    Args:
      families: one `trace_family` per response; None (no step line) is left out.
    Returns:
      −Σ p log p over the distinct families; 0.0 with at most one family.
    """
    counts = Counter(f for f in families if f is not None)
    total = sum(counts.values())
    return float(-sum(c / total * math.log(c / total) for c in counts.values())) if total else 0.0


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
        tokens = tokenize(expr)
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
        node = parse_tokens(tokens)
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
        pool = [leaf(numbers[i]) for i in rng.permutation(n)[:k]]
        while len(pool) > 1:
            x = pool.pop(int(rng.integers(len(pool))))
            y = pool.pop(int(rng.integers(len(pool))))
            op = self.operators[int(rng.integers(len(self.operators)))]
            if op == "/" and not y[1]:
                return None
            pool.append(apply(op, x, y))
        return pool[0]

    def problem(self, index: int, split: str = "train") -> Problem:
        numbers, answer = self._draw(self.rng(index, split))
        target = int(parse(answer)[1])
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

    def alternative_solutions(self, problem: Problem, k: int) -> list[str]:
        """The first `k` other canonical solutions (solver order), as step trace + answer."""
        own = canonical(problem.answer)
        others = [s for s in problem.metadata["solutions"] if s != own][: max(k, 0)]
        return [f"{step_trace(s)}\nAnswer: {s}".lstrip("\n") for s in others]

    def group_metrics(self, problem: Problem, responses: list[str]) -> dict[str, float]:
        """Solution coverage, entrance-family entropy (nats) and distinct families of responses."""
        families = [trace_family(r) for r in responses]
        return {
            "coverage": solution_coverage(responses, problem),
            "entrance_entropy": family_entropy(families),
            "entrance_families": float(len({f for f in families if f is not None})),
        }

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Scores the expression on the response's last "Answer:" line (see check_expression)."""
        m = problem.metadata
        return check_expression(
            extract_answer(response), m["numbers"], m["target"], m["use_all"], m["operators"]
        )
