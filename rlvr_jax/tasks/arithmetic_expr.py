"""Integer expression trees of the arithmetic tasks: parse, render, generate, evaluation orders.

A tree's operations are indexed by their operator's position in the expression
text (0-based, left to right), so an evaluation order can be written as a list
of indices (the strategy cue). Only the task's own expressions are parsed here,
never model output. Used by `rlvr_jax.tasks.arithmetic` and `multilingual`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable

from rlvr_jax.tasks.base import Problem

VALUE_BOUND = 10_000  # |every intermediate value| <= this
MAX_DIGITS = 12  # integer literals in responses longer than this are refused
ALL_OPERATORS = "+-*"

_PREC = {"+": 1, "-": 1, "*": 2}
_ATTEMPTS = 128  # generation draws before the all-ones fallback
_TOKEN_RE = re.compile(rf"\s*(?:([0-9]{{1,{MAX_DIGITS}}})|([-+*()]))")

Step = tuple[int, str, int, int]  # (a, op, b, c) for the line "a op b = c"


@dataclasses.dataclass(frozen=True)
class Node:
    """A node of an expression tree.

    Attributes:
      value: exact integer value of the sub-expression.
      op: "+", "-" or "*" for an operation, None for an operand.
      index: an operation's position among the operators of the expression text
        (0-based, left to right); an operand's position among the operands.
      left, right: the operands of an operation (None for an operand).
    """

    value: int
    op: str | None = None
    index: int = 0
    left: Node | None = None
    right: Node | None = None


def apply_op(op: str, a: int, b: int) -> int:
    """a op b for op in "+-*" (exact integers)."""
    return a + b if op == "+" else a - b if op == "-" else a * b


class _Parser:
    """Recursive descent over the task's own expressions (never model output)."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.ops, self.leaves = tokens, 0, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expr(self, ops: str = "+-") -> Node:
        node = self.factor() if ops == "*" else self.expr("*")
        while self.peek() is not None and self.peek() in ops:
            op, index = self.tokens[self.pos], self.ops
            self.pos, self.ops = self.pos + 1, self.ops + 1
            right = self.factor() if ops == "*" else self.expr("*")
            node = Node(apply_op(op, node.value, right.value), op, index, node, right)
        return node

    def factor(self) -> Node:
        tok = self.peek()
        self.pos += 1
        if tok == "(":
            node = self.expr()
            if self.peek() != ")":
                raise ValueError("unbalanced parentheses")
            self.pos += 1
            return node
        if tok is None or not tok.isdigit():
            raise ValueError(f"expected a number, got {tok!r}")
        self.leaves += 1
        return Node(int(tok), None, self.leaves - 1)


@functools.lru_cache(maxsize=4096)
def parse_expression(text: str) -> Node:
    """Parses one of this task's expressions (digits, + - *, parentheses) into an indexed tree.

    Args:
      text: a task expression, e.g. "(7 + 5) * 3 - 4" (at most 512 characters).

    Returns:
      The root Node; operators are indexed left to right in the text.

    Raises:
      ValueError: on anything that is not such an expression.
    """
    if len(text) > 512:
        raise ValueError("expression too long")
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise ValueError(f"bad expression {text!r}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    parser = _Parser(tokens)
    root = parser.expr()
    if parser.pos != len(tokens):
        raise ValueError(f"trailing tokens in {text!r}")
    return root


def render(node: Node, number: Callable[[int], str] = str, ops: dict | None = None) -> str:
    """Writes a tree with the fewest parentheses that parse back to the same tree.

    Args:
      node: the root.
      number: how to write an operand (digits by default; number words in multilingual.py).
      ops: how to write each operator (default: the symbol itself).
    """
    if node.op is None:
        return number(node.value)
    left, right = render(node.left, number, ops), render(node.right, number, ops)
    # Left-associative parse: an equal-precedence right child needs parentheses.
    if node.left.op and _PREC[node.left.op] < _PREC[node.op]:
        left = f"({left})"
    if node.right.op and _PREC[node.right.op] <= _PREC[node.op]:
        right = f"({right})"
    return f"{left} {(ops or {}).get(node.op, node.op)} {right}"


def operations(node: Node) -> list[Node]:
    """The operation nodes of a tree in post-order (the reference evaluation order)."""
    if node.op is None:
        return []
    return operations(node.left) + operations(node.right) + [node]


def reference_steps(tree: Node) -> list[Step]:
    """(a, op, b, c) of every operation in the reference (post-order) order."""
    return [(n.left.value, n.op, n.right.value, n.value) for n in operations(tree)]


def num_orders(tree: Node) -> int:
    """Number of valid evaluation orders: m! / prod(subtree sizes) over the m operations."""
    sizes = {}
    for n in operations(tree):
        sizes[n.index] = 1 + sum(sizes.get(c.index, 0) for c in (n.left, n.right) if c.op)
    return math.factorial(len(sizes)) // math.prod(sizes.values())


def _draw(rng, n: int, ops: str, cap: int, parentheses: bool) -> Node:
    """One random tree with n operands in 1..cap (indices are fixed by a render/parse trip)."""

    def shape(k: int) -> Node:
        if k == 1:
            return Node(int(rng.integers(1, cap + 1)))
        split, op = int(rng.integers(1, k)), ops[int(rng.integers(len(ops)))]
        left, right = shape(split), shape(k - split)
        if op == "-" and left.value < right.value:
            left, right = right, left  # keeps every value >= 0
        return Node(apply_op(op, left.value, right.value), op, 0, left, right)

    if parentheses:
        return parse_expression(render(shape(n)))
    parts = [str(int(rng.integers(1, cap + 1)))]
    for _ in range(n - 1):
        parts += [ops[int(rng.integers(len(ops)))], str(int(rng.integers(1, cap + 1)))]
    return parse_expression(" ".join(parts))


def _nodes(node: Node) -> list[Node]:
    return [node] if node.op is None else [node, *_nodes(node.left), *_nodes(node.right)]


def generate_expression(
    rng, num_operands: int, max_operand: int, operators: str, allow_parentheses: bool
) -> Node:
    """A random expression tree whose intermediate values all lie in [0, VALUE_BOUND].

    Draws are rejected until the bound holds. From draw 32 on, negative values
    down to -VALUE_BOUND are accepted too (flat "-" chains rarely stay >= 0);
    from draw 64 on the operand range halves every 16 draws (long "*" chains).
    A final all-ones draw keeps |v| <= num_operands, so generation always ends.

    Args:
      rng: a numpy Generator (consumed deterministically).
      num_operands, max_operand, operators, allow_parentheses: see ArithmeticTask.

    Returns:
      The indexed root Node.
    """
    for attempt in range(_ATTEMPTS):
        cap = max(1, max_operand >> (max(0, attempt - 48) // 16))
        tree = _draw(rng, num_operands, operators, cap, allow_parentheses)
        low = 0 if attempt < 32 else -VALUE_BOUND
        if all(low <= n.value <= VALUE_BOUND for n in _nodes(tree)):
            return tree
    return _draw(rng, num_operands, operators, 1, allow_parentheses)


def problem_tree(problem: Problem) -> Node:
    """The expression tree of a generated problem (parsed from metadata["expression"])."""
    return parse_expression(problem.metadata["expression"])
