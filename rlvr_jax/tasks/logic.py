"""Knights and knaves: logic puzzles with a brute-force solver and unique solutions.

Every person on the island is a knight (always tells the truth) or a knave
(always lies), and each makes one statement about the others or themselves. A
statement is a small AST of nested tuples (hashable, JSON-friendly):

  ("is", person, "knight" | "knave")   atom: person index and role
  ("not", a)
  ("and", a, b) | ("or", a, b) | ("if", a, b) | ("iff", a, b)

The generator samples statements up to `max_depth` nested connectives and
resamples them from the problem's own generator until exactly one assignment of
roles is consistent, so every puzzle has one right answer. The default reward is
binary; `partial_score` gives the fraction of people labelled correctly as an
optional dense reward.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

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

Node = tuple  # a statement AST node, see the module docstring
Assignment = tuple[bool, ...]  # per person: True = knight, False = knave

KNIGHT, KNAVE = "knight", "knave"
ROLES = (KNIGHT, KNAVE)
BINARY = ("and", "or", "if", "iff")
# "not" is drawn less often: doubled negations read badly and add little.
_CONNECTIVES = ("not", *BINARY)
_CONNECTIVE_P = (0.1, 0.25, 0.25, 0.2, 0.2)
# Chance that a sub-statement below the top level stops at an atom early; the
# top level almost always has a connective (plain atoms make trivial puzzles).
_P_ATOM, _P_ATOM_TOP = 0.35, 0.1
# Local search never needs this many resamples in practice (tests measure it);
# the cap turns an impossible configuration into a loud error, not a hang.
_MAX_RESAMPLES = 20_000
_MAX_ITEMS = 32  # answer items the verifier reads before calling it malformed
_ITEM_RE = re.compile(r"([^\W\d_]{1,32})\s*=\s*([^\W\d_]{1,32})")
_NAME_RE = re.compile(r"[A-Za-z]{2,12}")

DEFAULT_NAMES = ("Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ida", "Jon", "Kim", "Lou")


def evaluate(node: Node, assignment: Assignment) -> bool:
    """Truth value of a statement under an assignment.

    Args:
      node: statement AST (see module docstring).
      assignment: per person, True = knight.

    Returns:
      Whether the statement is true.
    """
    op = node[0]
    if op == "is":
        return assignment[node[1]] == (node[2] == KNIGHT)
    if op == "not":
        return not evaluate(node[1], assignment)
    a, b = evaluate(node[1], assignment), evaluate(node[2], assignment)
    if op == "and":
        return a and b
    if op == "or":
        return a or b
    if op == "if":
        return (not a) or b
    if op == "iff":
        return a == b
    raise ValueError(f"unknown connective {op!r}; valid: {('is', *_CONNECTIVES)}")


def solve(statements: Sequence[Node | None], n: int) -> list[Assignment]:
    """All consistent role assignments, by brute force over the 2^n candidates.

    A person is a knight iff their statement is true; a person whose statement
    is None says nothing and is unconstrained by it.

    Args:
      statements: one statement (or None) per person, length n.
      n: number of people.

    Returns:
      Every consistent assignment (tuples of n bools, True = knight), knights-first
      lexicographic order.
    """
    if len(statements) != n:
        raise ValueError(f"need one statement per person: got {len(statements)} for n={n}")
    return [
        a
        for a in itertools.product((True, False), repeat=n)
        if all(s is None or evaluate(s, a) == a[i] for i, s in enumerate(statements))
    ]


def depth(node: Node) -> int:
    """Nesting depth of connectives: an atom has depth 0."""
    if node[0] == "is":
        return 0
    return 1 + max(depth(child) for child in node[1:])


def num_connectives(node: Node) -> int:
    """Number of connectives in a statement."""
    if node[0] == "is":
        return 0
    return 1 + sum(num_connectives(child) for child in node[1:])


def render(node: Node, names: Sequence[str], speaker: int | None = None) -> str:
    """English text of a statement; deterministic and unambiguous.

    Every compound child of a connective is put in parentheses so the text has
    one parse; a negated atom reads "Bob is not a knight" and counts as a unit.
    The speaker refers to themselves as "I".

    Args:
      node: statement AST.
      names: person names by index.
      speaker: index of the person speaking, or None for third person throughout.

    Returns:
      The statement text, without final punctuation or capitalisation.
    """
    op = node[0]
    if op == "is" or (op == "not" and node[1][0] == "is"):
        atom, negated = (node, False) if op == "is" else (node[1], True)
        subject, verb = ("I", "am") if atom[1] == speaker else (names[atom[1]], "is")
        return f"{subject} {verb} {'not ' if negated else ''}a {atom[2]}"
    parts = [_render_unit(child, names, speaker) for child in node[1:]]
    if op == "not":
        return f"it is not true that {parts[0]}"
    if op == "and":
        return f"{parts[0]} and {parts[1]}"
    if op == "or":
        return f"{parts[0]} or {parts[1]}"
    if op == "if":
        return f"if {parts[0]} then {parts[1]}"
    if op == "iff":
        return f"{parts[0]} if and only if {parts[1]}"
    raise ValueError(f"unknown connective {op!r}; valid: {('is', *_CONNECTIVES)}")


def _render_unit(node: Node, names: Sequence[str], speaker: int | None) -> str:
    text = render(node, names, speaker)
    is_unit = node[0] == "is" or (node[0] == "not" and node[1][0] == "is")
    return text if is_unit else f"({text})"


def render_statement(node: Node, names: Sequence[str], speaker: int) -> str:
    """The prompt line of a statement, e.g. "Ann says: Bob is a knave and Cal is a knight."."""
    text = render(node, names, speaker)
    return f"{names[speaker]} says: {text[0].upper()}{text[1:]}."


def random_statement(rng: np.random.Generator, n: int, max_depth: int, top: bool = True) -> Node:
    """A random statement over n people with at most `max_depth` nested connectives.

    Args:
      rng: generator; the only source of randomness.
      n: number of people the atoms may mention (speaker included).
      max_depth: connective nesting budget, >= 0.
      top: whether this is the whole statement (then an atom is rarely chosen).

    Returns:
      A statement AST.
    """
    p_atom = _P_ATOM_TOP if top else _P_ATOM
    if max_depth == 0 or rng.random() < p_atom:
        return ("is", int(rng.integers(n)), ROLES[int(rng.integers(2))])
    op = _CONNECTIVES[int(rng.choice(len(_CONNECTIVES), p=_CONNECTIVE_P))]
    first = random_statement(rng, n, max_depth - 1, top=False)
    if op == "not":
        return (op, first)
    second = random_statement(rng, n, max_depth - 1, top=False)
    # Two literals about one person ("I am a knight or I am a knight") are
    # degenerate; redraw the second (n >= 2, so a different person comes soon).
    while _literal_person(first) is not None and _literal_person(first) == _literal_person(second):
        second = random_statement(rng, n, max_depth - 1, top=False)
    return (op, first, second)


def _literal_person(node: Node) -> int | None:
    """The person of an atom or a negated atom; None for compound statements."""
    if node[0] == "not":
        node = node[1]
    return node[1] if node[0] == "is" else None


@register
@dataclasses.dataclass(frozen=True)
class KnightsKnaves(Task):
    """Knights-and-knaves puzzles with exactly one consistent assignment.

    Attributes:
      num_people: people (and statements) per puzzle, 2..6.
      max_depth: most nested connectives in one statement, 1..4 (depth 0, atoms
        only, never has a unique solution: flipping a whole group keeps it consistent).
      names: pool of distinct alphabetic names; each puzzle draws num_people of them.
      seed: task seed.

    Metadata of each problem: people (names in prompt order), statements
    (rendered lines), trees (statement ASTs), assignment (roles in people order),
    resamples (statements redrawn until the solution was unique), depth (deepest
    statement), connectives (total over statements).
    """

    name: ClassVar[str] = "knights_knaves"
    num_people: int = 3
    max_depth: int = 2
    names: tuple[str, ...] = DEFAULT_NAMES

    def __post_init__(self):
        if type(self.num_people) is not int or self.num_people not in range(2, 7):
            raise ValueError(f"num_people must be in 2..6, got {self.num_people!r}")
        if type(self.max_depth) is not int or self.max_depth not in range(1, 5):
            raise ValueError(f"max_depth must be in 1..4, got {self.max_depth!r}")
        if not isinstance(self.names, tuple):
            raise ValueError(f"names must be a tuple of strings, got {type(self.names).__name__}")
        for nm in self.names:
            if not isinstance(nm, str) or not _NAME_RE.fullmatch(nm) or nm.lower() in ROLES:
                raise ValueError(f"names must be 2-12 ASCII letters, not a role, got {nm!r}")
        if len({nm.lower() for nm in self.names}) != len(self.names):
            raise ValueError(f"names must be distinct ignoring case, got {self.names}")
        if len(self.names) < self.num_people:
            raise ValueError(f"need >= {self.num_people} names, got {len(self.names)}")

    def problem(self, index: int, split: str = "train") -> Problem:
        rng = self.rng(index, split)
        n = self.num_people
        people = tuple(self.names[int(i)] for i in rng.choice(len(self.names), n, replace=False))
        trees = [random_statement(rng, n, self.max_depth) for _ in range(n)]
        resamples = 0
        # Local search: redraw one person's statement at a time until exactly one
        # assignment is consistent; much faster than redrawing all n statements.
        while len(solutions := solve(trees, n)) != 1:
            if resamples >= _MAX_RESAMPLES:
                raise RuntimeError(f"no unique puzzle after {resamples} resamples: {self}")
            trees[int(rng.integers(n))] = random_statement(rng, n, self.max_depth)
            resamples += 1
        (assignment,) = solutions
        roles = tuple(KNIGHT if k else KNAVE for k in assignment)
        statements = tuple(render_statement(t, people, i) for i, t in enumerate(trees))
        answer = ", ".join(f"{p}={r}" for p, r in zip(people, roles, strict=True))
        fmt = ", ".join(f"{p}=knight/knave" for p in people)
        prompt = "\n".join(
            [
                "Knights always tell the truth. Knaves always lie.",
                *statements,
                f"Who is a knight and who is a knave? End with: Answer: {fmt}",
            ]
        )
        return Problem(
            id=self.problem_id(index, split),
            prompt=prompt,
            answer=answer,
            solution=_reference_solution(people, trees, assignment, answer),
            metadata={
                "people": people,
                "statements": statements,
                "trees": tuple(trees),
                "assignment": roles,
                "resamples": resamples,
                "depth": max(depth(t) for t in trees),
                "connectives": sum(num_connectives(t) for t in trees),
            },
        )

    def verify(self, problem: Problem, response: str) -> Verdict:
        people, truth = problem.metadata["people"], problem.metadata["assignment"]
        labels, error, raw = _parse_labels(response, people)
        if error:
            return Verdict(0.0, MALFORMED, raw, error)
        parsed = ", ".join(f"{p}={labels[p]}" for p in people)
        wrong = [p for p, r in zip(people, truth, strict=True) if labels[p] != r]
        if wrong:
            return Verdict(0.0, WRONG_ANSWER, parsed, f"wrong role for {', '.join(wrong)}")
        return Verdict(1.0, CORRECT, parsed)

    def partial_score(self, problem: Problem, response: str) -> float:
        """Optional dense reward: the fraction of people labelled correctly.

        Not the default reward (that is verify's binary one). Items with unknown
        names or roles are ignored, and a person labelled more than once counts
        as wrong, so hedging ("Ann=knight, Ann=knave") earns nothing.

        Args:
          problem: a problem of this task.
          response: any string.

        Returns:
          A float in [0, 1]; 0 when there is no parsable answer.
        """
        people, truth = problem.metadata["people"], problem.metadata["assignment"]
        items, _ = _split_items(response)
        lookup = {p.lower(): p for p in people}
        seen: dict[str, list[str]] = {p: [] for p in people}
        for item in items or ():
            m = _ITEM_RE.fullmatch(item)
            if m and m[1].lower() in lookup and m[2].lower() in ROLES:
                seen[lookup[m[1].lower()]].append(m[2].lower())
        right = sum(seen[p] == [r] for p, r in zip(people, truth, strict=True))
        return right / len(people)


def _split_items(response: str) -> tuple[list[str] | None, str]:
    """The "Answer:" line split into non-empty items (None if absent), and the raw answer."""
    raw = extract_answer(response)  # bounded: reads a capped tail, answer <= 200 chars
    if raw is None:
        return None, ""
    text = raw.rstrip(" .")
    items = [s.strip() for s in re.split(r"[,;]", text)]
    return [s for s in items if s], raw


def _parse_labels(response: str, people: Sequence[str]) -> tuple[dict[str, str], str, str | None]:
    """Parses "Name=role" items into {person: role}; returns (labels, error, raw answer)."""
    items, raw = _split_items(response)
    if items is None:
        return {}, "no 'Answer:' line", None
    if len(items) > _MAX_ITEMS:
        return {}, f"more than {_MAX_ITEMS} answer items", raw
    lookup = {p.lower(): p for p in people}
    labels: dict[str, str] = {}
    for item in items:
        m = _ITEM_RE.fullmatch(item)
        if m is None:
            return {}, f"item {item[:40]!r} is not Name=role", raw
        name, role = m[1].lower(), m[2].lower()
        if name not in lookup:
            return {}, f"unknown name {m[1]!r}", raw
        if lookup[name] in labels:
            return {}, f"{lookup[name]} labelled twice", raw
        if role not in ROLES:
            return {}, f"role {m[2]!r} is neither knight nor knave", raw
        labels[lookup[name]] = role
    missing = [p for p in people if p not in labels]
    if missing:
        return {}, f"no role for {', '.join(missing)}", raw
    return labels, "", raw


def _reference_solution(
    people: Sequence[str], trees: Sequence[Node], assignment: Assignment, answer: str
) -> str:
    """Assignment listing with a one-line check per statement, then the Answer line."""
    lines = [
        f"{p} is a {KNIGHT if k else KNAVE}, so {p}'s statement is {'true' if k else 'false'}."
        for p, k in zip(people, assignment, strict=True)
    ]
    # The per-line claims hold by construction; the solver also ruled out the rest.
    assert all(evaluate(t, assignment) == k for t, k in zip(trees, assignment, strict=True))
    others = 2 ** len(people) - 1
    lines.append(f"Each of the other {others} assignments contradicts some statement.")
    lines.append(f"Answer: {answer}")
    return "\n".join(lines)
