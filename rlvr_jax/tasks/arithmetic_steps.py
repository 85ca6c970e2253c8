"""Step-trace checking of the arithmetic tasks: Cliff's first-wrong-step locator and cues.

A trace is read as step lines "a op b = c" and a final answer line, in a
`TraceFormat` (ASCII here; multilingual.py localizes it).

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
import re
from collections.abc import Callable, Sequence

from rlvr_jax.tasks.arithmetic_expr import (
    MAX_DIGITS,
    Node,
    Step,
    apply_op,
    operations,
    problem_tree,
)
from rlvr_jax.tasks.base import MAX_RESPONSE_CHARS, Problem

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

_MAX_STATES = 256  # bound on tracked step-to-operation assignments (ambiguous equal values)
_INT_RE = re.compile(rf"[+-]?[0-9]{{1,{MAX_DIGITS}}}\.?")
_NUM = rf"(-?[0-9]{{1,{MAX_DIGITS}}})"
_STEP_RE = re.compile(rf"{_NUM}[ \t]*([-+*])[ \t]*{_NUM}[ \t]*=[ \t]*{_NUM}")
_ANSWER_MARK_RE = re.compile(r"answer[ \t]*[:=]", re.IGNORECASE)
_LINE_RE = re.compile(r"[^\n]+")


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
