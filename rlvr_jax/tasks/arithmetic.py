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

Step verification (`first_wrong_step` and the rules of a wrong step) lives in
`arithmetic_steps`, expression trees in `arithmetic_expr`; both are re-exported here.
"""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

from rlvr_jax.tasks import register

# Re-exported: the public names of the two modules that arithmetic was split into.
from rlvr_jax.tasks.arithmetic_expr import (  # noqa: F401
    ALL_OPERATORS,
    MAX_DIGITS,
    VALUE_BOUND,
    Node,
    Step,
    _nodes,
    apply_op,
    generate_expression,
    num_orders,
    operations,
    parse_expression,
    problem_tree,
    reference_steps,
    render,
)
from rlvr_jax.tasks.arithmetic_steps import (  # noqa: F401
    ASCII_FORMAT,
    STEP_ARITHMETIC,
    STEP_INVALID,
    STEP_MISSING,
    STEP_OK,
    STEP_REASONS,
    STEP_UNPARSABLE,
    STEP_WRONG_FINAL,
    StepCheck,
    TraceFormat,
    first_wrong_step,
    parse_integer,
    parse_step_line,
    response_cue,
    token_span,
)
from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
)

MAX_OPERANDS = 12
PROMPT = (
    'Evaluate: {expression}\nWrite one step per line as "a op b = c". End with "Answer: <integer>".'
)
HINT_HEADER = "Reference solution:"
_LONG_INT_RE = re.compile(r"[+-]?[0-9]+\.?")


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


def hint(problem: Problem) -> str:
    """Privileged context for self-distillation (OPSD family): header + the reference trace.

    The teacher view is `problem.prompt + "\\n" + hint(problem)`; the student sees the prompt only.
    """
    return f"{HINT_HEADER}\n{problem.solution}"


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
