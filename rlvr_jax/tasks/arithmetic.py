"""Multi-step integer arithmetic with step traces, a step verifier and strategy cues.

A problem is an integer expression such as "(7 + 5) * 3 - 4" with operands in
1..max_operand. The reference solution evaluates it one operation per line in
post-order of its tree (left operand first) and ends with the answer line:
"7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\nAnswer: 32". Intermediate values lie in
[0, VALUE_BOUND] by construction (see `generate_expression` for extreme options).

For step-level methods: `first_wrong_step` (Cliff's exact locator), `response_cue`
(Cue-GRPO's strategy cue: operator positions, 0-based left to right in the
expression text, in the order the steps perform them, e.g. "1,0,2"; any order
computing children before parents is valid, `metadata["num_orders"]` counts
them), `hint` (privileged context of self-distillation) and `token_span`.

What counts as a wrong step. Only the first MAX_RESPONSE_CHARS characters are
read. The answer line is the last line containing "answer:" / "answer=" (any
case); later lines are ignored; earlier lines containing "=" are step lines,
other lines (prose) are ignored. Step lines are checked in order up to the
first wrong one:
  * unparsable: not exactly "<int> <op> <int> = <int>" (op in + - *, optional
    minus sign, ASCII digits, at most MAX_DIGITS of them);
  * arithmetic: a op b != c;
  * invalid_step: right arithmetic, but no operation of the expression is
    "a op b" on available values: the operands of the expression and results
    of earlier steps, each consumed once, where an operation may run only after
    both of its operands are computed; + and * may swap operands, - may not.
    Equal values are ambiguous, so every consistent assignment is tracked;
  * missing_steps: all steps right, but they do not compute the whole expression;
  * wrong_final: complete trace, but the answer line is missing, not an integer
    or not the value.
The last two report index = number of steps and the answer line's span (or the
empty span at the end of the text read).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import ClassVar

from rlvr_jax.tasks import register
from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    MAX_RESPONSE_CHARS,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
)

VALUE_BOUND = 10_000  # |every intermediate value| <= this
MAX_DIGITS = 12  # integer literals in responses longer than this are refused
MAX_OPERANDS = 12
ALL_OPERATORS = "+-*"
PROMPT = (
    'Evaluate: {expression}\nWrite one step per line as "a op b = c". End with "Answer: <integer>".'
)
HINT_HEADER = "Reference solution:"

# Step-check reasons (StepCheck.reason).
STEP_OK = "ok"
STEP_UNPARSABLE = "unparsable"
STEP_ARITHMETIC = "arithmetic"
STEP_INVALID = "invalid_step"
STEP_MISSING = "missing_steps"
STEP_WRONG_FINAL = "wrong_final"
STEP_REASONS = (
    STEP_OK,
    STEP_UNPARSABLE,
    STEP_ARITHMETIC,
    STEP_INVALID,
    STEP_MISSING,
    STEP_WRONG_FINAL,
)

_PREC = {"+": 1, "-": 1, "*": 2}
_ATTEMPTS = 128  # generation draws before the all-ones fallback
_MAX_STATES = 256  # bound on tracked step-to-operation assignments (ambiguous equal values)
_INT_RE = re.compile(rf"[+-]?[0-9]{{1,{MAX_DIGITS}}}\.?")
_LONG_INT_RE = re.compile(r"[+-]?[0-9]+\.?")
_NUM = rf"(-?[0-9]{{1,{MAX_DIGITS}}})"
_STEP_RE = re.compile(rf"{_NUM}[ \t]*([-+*])[ \t]*{_NUM}[ \t]*=[ \t]*{_NUM}")
_ANSWER_MARK_RE = re.compile(r"answer[ \t]*[:=]", re.IGNORECASE)
_LINE_RE = re.compile(r"[^\n]+")
_TOKEN_RE = re.compile(rf"\s*(?:([0-9]{{1,{MAX_DIGITS}}})|([-+*()]))")


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


@dataclasses.dataclass(frozen=True)
class StepCheck:
    """Result of `first_wrong_step`.

    Attributes:
      index: 0-based index of the first wrong step line; `num_steps` when the
        steps are right but the trace is incomplete or the final answer wrong;
        None when everything is right.
      char_span: (start, end) character offsets of that line (stripped) in the
        response, or of the answer line / the empty end span; None when right.
      num_steps: number of step lines in the response.
      reason: one of STEP_OK, STEP_UNPARSABLE, STEP_ARITHMETIC, STEP_INVALID,
        STEP_MISSING, STEP_WRONG_FINAL.
    """

    index: int | None
    char_span: tuple[int, int] | None
    num_steps: int
    reason: str


Step = tuple[int, str, int, int]  # (a, op, b, c) for the line "a op b = c"


@dataclasses.dataclass(frozen=True)
class TraceFormat:
    """How step lines and the final-answer line are written (multilingual.py localizes it).

    Attributes:
      parse_step: stripped line -> (a, op, b, c) with op in "+-*", or None.
      is_step: whether a stripped line claims to be a step (it is then checked).
      answer_marker: regex (within one line) whose last match in the text marks
        the final answer; the answer is the rest of that line (<= 200 characters).
      parse_answer: answer text -> integer, or None.
    """

    parse_step: Callable[[str], Step | None]
    is_step: Callable[[str], bool]
    answer_marker: re.Pattern
    parse_answer: Callable[[str], int | None]


def apply_op(op: str, a: int, b: int) -> int:
    """a op b for op in "+-*" (exact integers)."""
    return a + b if op == "+" else a - b if op == "-" else a * b


def parse_integer(text: str | None) -> int | None:
    """Bounded strict integer parse: optional sign, 1..MAX_DIGITS ASCII digits, optional final ".".

    Unicode digits ('٣', '３'), separators, words and longer literals give None.
    """
    if not isinstance(text, str) or len(text) > 200:
        return None
    text = text.strip()
    if not _INT_RE.fullmatch(text):
        return None
    return int(text.rstrip("."))


def parse_step_line(line: str) -> Step | None:
    """Parses a stripped line "a op b = c" (ASCII digits, <= MAX_DIGITS each); None otherwise."""
    if len(line) > 4 * MAX_DIGITS + 40:
        return None
    m = _STEP_RE.fullmatch(line.strip())
    if not m:
        return None
    return int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))


ASCII_FORMAT = TraceFormat(
    parse_step=parse_step_line,
    is_step=lambda line: "=" in line,
    answer_marker=_ANSWER_MARK_RE,
    parse_answer=parse_integer,
)


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


def format_trace(tree: Node) -> str:
    """The reference solution: one "a op b = c" line per operation, then "Answer: <value>"."""
    lines = [f"{a} {op} {b} = {c}" for a, op, b, c in reference_steps(tree)]
    return "\n".join([*lines, f"Answer: {tree.value}"])


def build_problem(problem_id: str, tree: Node) -> Problem:
    """The Problem for an expression tree (prompt, reference trace, metadata).

    Metadata: expression (str), value (int), operands (list[int], left to
    right), ops (str, operators left to right), num_steps (int), cue (str, the
    reference order of operations), num_orders (int, valid orders).
    """
    order = [n.index for n in operations(tree)]
    leaves = [n for n in _nodes(tree) if n.op is None]
    expression = render(tree)
    metadata = {
        "expression": expression,
        "value": tree.value,
        "operands": [n.value for n in sorted(leaves, key=lambda n: n.index)],
        "ops": "".join(c for c in expression if c in ALL_OPERATORS),
        "num_steps": len(order),
        "cue": ",".join(map(str, order)),
        "num_orders": num_orders(tree),
    }
    prompt = PROMPT.format(expression=expression)
    return Problem(problem_id, prompt, str(tree.value), format_trace(tree), metadata)


def problem_tree(problem: Problem) -> Node:
    """The expression tree of a generated problem (parsed from metadata["expression"])."""
    return parse_expression(problem.metadata["expression"])


def _scan(response: str, fmt: TraceFormat):
    """Step lines [(span, line)], the answer line (span, text) or None, and the length read."""
    text = response[:MAX_RESPONSE_CHARS] if isinstance(response, str) else ""
    answer, body = None, text
    marks = list(fmt.answer_marker.finditer(text))  # one pass in C, not one regex per line
    if marks:
        line_start = text.rfind("\n", 0, marks[-1].start()) + 1
        line_end = text.find("\n", marks[-1].end())
        line_end = len(text) if line_end < 0 else line_end
        answer = (
            _stripped_span(text, line_start, line_end),
            text[marks[-1].end() : line_end][:200],
        )
        body = text[:line_start]
    steps = []
    for m in _LINE_RE.finditer(body):
        line = m.group().strip()
        if line and fmt.is_step(line):
            steps.append((_stripped_span(text, m.start(), m.end()), line))
    return steps, answer, len(text)


def _stripped_span(text: str, start: int, end: int) -> tuple[int, int]:
    """(start, end) of text[start:end] without its surrounding whitespace."""
    raw = text[start:end]
    lead = len(raw) - len(raw.lstrip())
    return start + lead, start + lead + len(raw.strip())


def _walk(tree: Node, steps, fmt: TraceFormat) -> tuple[int | None, str, dict]:
    """Checks steps in order; returns (first bad index or None, reason, reachable states).

    A state is the frozenset of computed operation indices, mapped to the
    lexicographically smallest order that reaches it.
    """
    ops = {n.index: n for n in operations(tree)}
    states: dict[frozenset, tuple[int, ...]] = {frozenset(): ()}
    for i, (_, line) in enumerate(steps):
        # Parsed lazily: the walk stops within len(ops) + 1 steps whatever the response length.
        parsed = fmt.parse_step(line)
        if parsed is None:
            return i, STEP_UNPARSABLE, states
        a, op, b, c = parsed
        if apply_op(op, a, b) != c:
            return i, STEP_ARITHMETIC, states
        nxt: dict[frozenset, tuple[int, ...]] = {}
        for done, order in states.items():
            for k, n in ops.items():
                if k in done or n.op != op:
                    continue
                if any(ch.op is not None and ch.index not in done for ch in (n.left, n.right)):
                    continue  # an operand of this operation is not computed yet
                x, y = n.left.value, n.right.value
                if (x, y) == (a, b) or (op != "-" and (y, x) == (a, b)):
                    key, new = done | {k}, (*order, k)
                    if key not in nxt or new < nxt[key]:
                        nxt[key] = new
        if not nxt:
            return i, STEP_INVALID, states
        states = dict(sorted(nxt.items(), key=lambda kv: kv[1])[:_MAX_STATES])
    return None, STEP_OK, states


def first_wrong_step(problem: Problem, response: str, fmt: TraceFormat = ASCII_FORMAT) -> StepCheck:
    """Cliff's exact locator: the first wrong step line of a response (rules in the module doc).

    Never raises on any response string; bounded to MAX_RESPONSE_CHARS characters.

    Args:
      problem: a problem of this task (uses metadata["expression"]).
      response: the response text.
      fmt: how steps and the answer are written (ASCII_FORMAT here).

    Returns:
      A StepCheck; `char_span` indexes into `response`.
    """
    tree = problem_tree(problem)
    steps, answer, end = _scan(response, fmt)
    bad, reason, states = _walk(tree, steps, fmt)
    if bad is not None:
        return StepCheck(bad, steps[bad][0], len(steps), reason)
    tail = answer[0] if answer else (end, end)
    if frozenset(n.index for n in operations(tree)) not in states:
        return StepCheck(len(steps), tail, len(steps), STEP_MISSING)
    if answer is None or fmt.parse_answer(answer[1]) != tree.value:
        return StepCheck(len(steps), tail, len(steps), STEP_WRONG_FINAL)
    return StepCheck(None, None, len(steps), STEP_OK)


def response_cue(problem: Problem, response: str, fmt: TraceFormat = ASCII_FORMAT) -> str | None:
    """The strategy cue of a response: operator positions in the order its steps perform them.

    Args:
      problem: a problem of this task.
      response: the response text.
      fmt: trace format (ASCII_FORMAT here).

    Returns:
      e.g. "1,0,2" (same format as metadata["cue"]), or None when the step lines
      are not a complete, valid evaluation of the expression (final answer not
      checked). Equal values that make the order ambiguous resolve to the
      lexicographically smallest order.
    """
    tree = problem_tree(problem)
    steps, _, _ = _scan(response, fmt)
    bad, _, states = _walk(tree, steps, fmt)
    order = states.get(frozenset(n.index for n in operations(tree)))
    return None if bad is not None or order is None else ",".join(map(str, order))


def hint(problem: Problem) -> str:
    """Privileged context for self-distillation (OPSD family): header + the reference trace.

    The teacher view is `problem.prompt + "\\n" + hint(problem)`; the student sees the prompt only.
    """
    return f"{HINT_HEADER}\n{problem.solution}"


def token_span(char_span: tuple[int, int], offsets: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Maps a character span to the token indices [first, last) that overlap it.

    Args:
      char_span: (start, end) character offsets, e.g. StepCheck.char_span.
      offsets: per-token (start, end) character offsets into the same text
        (a tokenizer's offset mapping); zero-width special tokens never overlap.

    Returns:
      (first, last) token indices; for an empty or uncovered span, (i, i) with i
      the first token ending after `start` (len(offsets) if none).
    """
    start, end = int(char_span[0]), int(char_span[1])
    hits = [i for i, (s, e) in enumerate(offsets) if int(s) < end and int(e) > start and e > s]
    if hits:
        return hits[0], hits[-1] + 1
    first = next((i for i, (_, e) in enumerate(offsets) if int(e) > start), len(offsets))
    return first, first


def integer_verdict(text: str | None, expected: int, parse=parse_integer) -> Verdict:
    """Verdict for an extracted answer text against the expected integer."""
    if text is None:
        return Verdict(0.0, MALFORMED, None, "no final answer")
    value = parse(text)
    if value is None:
        long = _LONG_INT_RE.fullmatch(text.strip()[:200])
        detail = f"more than {MAX_DIGITS} digits" if long else "not an integer"
        return Verdict(0.0, MALFORMED, None, detail)
    if value == expected:
        return Verdict(1.0, CORRECT, str(value))
    return Verdict(0.0, WRONG_ANSWER, str(value), f"expected {expected}")


@register
@dataclasses.dataclass(frozen=True)
class ArithmeticTask(Task):
    """Evaluate an integer expression step by step.

    Attributes:
      num_operands: operands per expression (2..MAX_OPERANDS); steps = num_operands - 1.
      max_operand: operands are drawn from 1..max_operand.
      operators: the operators used, a non-empty subset of "+-*".
      allow_parentheses: random tree shapes (written with minimal parentheses)
        instead of flat expressions evaluated by precedence.
    """

    name: ClassVar[str] = "arithmetic"
    # 4, not 3: with 3 operands the two operations are nested, so only one order
    # (one strategy cue) exists; 4 operands often have independent sub-expressions.
    num_operands: int = 4
    max_operand: int = 20
    operators: str = "+-*"
    allow_parentheses: bool = True

    def __post_init__(self):
        if not 2 <= self.num_operands <= MAX_OPERANDS:
            raise ValueError(f"num_operands must be in 2..{MAX_OPERANDS}, got {self.num_operands}")
        if not 1 <= self.max_operand <= VALUE_BOUND:
            raise ValueError(f"max_operand must be in 1..{VALUE_BOUND}, got {self.max_operand}")
        ops = self.operators
        if not ops or set(ops) - set(ALL_OPERATORS) or len(set(ops)) != len(ops):
            raise ValueError(f"operators must be distinct characters of {ALL_OPERATORS!r}: {ops!r}")

    def expression(self, index: int, split: str = "train") -> Node:
        """The expression tree of problem (index, split); shared by multilingual renderings."""
        return generate_expression(
            self.rng(index, split),
            self.num_operands,
            self.max_operand,
            self.operators,
            self.allow_parentheses,
        )

    def problem(self, index: int, split: str = "train") -> Problem:
        return build_problem(self.problem_id(index, split), self.expression(index, split))

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Final-answer integer equality via `extract_answer` (steps are not checked here)."""
        text = extract_answer(response) if isinstance(response, str) else None
        return integer_verdict(text, int(problem.answer))

    def first_wrong_step(self, problem: Problem, response: str) -> StepCheck:
        """See module-level `first_wrong_step`."""
        return first_wrong_step(problem, response)

    def response_cue(self, problem: Problem, response: str) -> str | None:
        """See module-level `response_cue`."""
        return response_cue(problem, response)

    def hint(self, problem: Problem) -> str:
        """See module-level `hint`."""
        return hint(problem)
