"""The verifiable-task interface: seeded problems, reference solutions, bounded verifiers.

A task is a frozen dataclass of its options (difficulty knobs) with two methods:
`problem(index, split)` builds one problem deterministically from
(options, seed, split, index), and `verify(problem, response)` scores a
response. Verifiers execute model output only inside the code sandbox (the code
tasks) and never raise on it: every response, however adversarial, gets a
`Verdict` with a reward and a reason.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

# Structured reasons a verifier reports.
CORRECT = "correct"
WRONG_ANSWER = "wrong_answer"  # parsed, but not the right answer
MALFORMED = "malformed"  # no parsable final answer, or an answer that breaks the task's rules
TIMEOUT = "timeout"  # the checker ran out of its time budget
REASONS = (CORRECT, WRONG_ANSWER, MALFORMED, TIMEOUT)

SPLITS = ("train", "validation", "test")
# Verifiers look at most at this many trailing characters of a response.
MAX_RESPONSE_CHARS = 8192


@dataclasses.dataclass(frozen=True)
class Problem:
    """One generated problem.

    Attributes:
      id: stable identifier "<task>/<split>/<index>".
      prompt: the text shown to the policy.
      answer: the reference final answer as a canonical string.
      solution: a full reference solution in the format the prompt asks for
        (SFT target; privileged hint for self-distillation methods).
      metadata: task-specific facts (inputs, difficulty, cues, entrance family, ...).
    """

    id: str
    prompt: str
    answer: str
    solution: str
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A verifier's result: reward, reason (one of REASONS), the parsed answer, a detail."""

    reward: float
    reason: str
    parsed: str | None = None
    detail: str = ""

    def __post_init__(self):
        if self.reason not in REASONS:
            raise ValueError(f"unknown verdict reason {self.reason!r}; valid: {REASONS}")


@dataclasses.dataclass(frozen=True)
class Task(abc.ABC):
    """Base class of every task. Subclasses are frozen dataclasses of their options.

    Attributes:
      seed: the task seed; (seed, split, index) fixes a problem.
    """

    name: ClassVar[str] = "task"
    # Options added after a task's problems were in use -> their defaults. An option
    # that holds its default is left out of the problem seed (`rng`), so adding it
    # does not change the existing problems.
    late_options: ClassVar[Mapping[str, Any]] = {}
    seed: int = 0

    @abc.abstractmethod
    def problem(self, index: int, split: str = "train") -> Problem:
        """The problem at `index` of `split`, deterministic in (options, seed, split, index)."""

    @abc.abstractmethod
    def verify(self, problem: Problem, response: str) -> Verdict:
        """Scores `response`; never raises on any string and returns within ~100 ms."""

    def verify_batch(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[Verdict]:
        """`verify` of each (problem, response) pair, in order.

        The default loops over `verify`; a task whose verifier has a batched form
        (the code tasks: one `SandboxPool.run` over every program) overrides it.
        """
        if len(problems) != len(responses):
            raise ValueError(f"{len(problems)} problems for {len(responses)} responses")
        return [self.verify(p, r) for p, r in zip(problems, responses, strict=True)]

    def alternative_solutions(self, problem: Problem, k: int) -> list[str]:
        """Up to `k` other correct solutions of `problem`, written like `problem.solution`.

        Distinct from `problem.solution` and from each other (e.g. GAR's auxiliary
        anchors). Tasks whose solution is unique return none (the default).
        """
        del problem, k
        return []

    def group_metrics(self, problem: Problem, responses: list[str]) -> dict[str, float]:
        """Task-specific statistics of several responses to one problem (evaluation).

        Countdown: solution coverage and entrance-family entropy; multilingual:
        language consistency. Evaluation averages each over problems.

        Returns:
          name -> float; none by default.
        """
        return {}

    def episode_turns(self) -> int:
        """Most model turns of an episode against `self.env(problem)`; 0: a single-turn task.

        A multi-turn task (tool use) overrides it and `env`; training
        (`rollout.name = "multi_turn"`) and evaluation then run episodes.
        """
        return 0

    def problems(self, n: int, split: str = "train", start: int = 0) -> list[Problem]:
        """`n` consecutive problems of `split` starting at `start`."""
        return [self.problem(i, split) for i in range(start, start + n)]

    def rng(self, index: int, split: str) -> np.random.Generator:
        """An independent generator per (task, options, seed, split, index).

        Hashing the options means two difficulty settings never share problems,
        and the split is part of the key so train and test never overlap by seed.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {SPLITS}")
        if index < 0:
            raise ValueError(f"problem index must be >= 0, got {index}")
        names = [f.name for f in dataclasses.fields(self)]
        options = tuple(
            value
            for name, value in zip(names, dataclasses.astuple(self), strict=True)
            if name not in self.late_options or value != self.late_options[name]
        )
        key = f"{self.name}|{options}|{split}|{index}".encode()
        return np.random.default_rng(np.frombuffer(hashlib.sha256(key).digest()[:16], np.uint32))

    def problem_id(self, index: int, split: str) -> str:
        return f"{self.name}/{split}/{index}"


_ANSWER_RE = re.compile(r"answer\s*[:=]\s*([^\n]{0,200})", re.IGNORECASE)


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the last `\\boxed{...}` or the last "Answer: ..." line.

    Bounded: only the last MAX_RESPONSE_CHARS characters are read and the
    regex has no nested quantifiers, so adversarial strings cost linear time.

    Returns:
      The stripped answer text, or None when the response states none.
    """
    if not isinstance(response, str):
        return None
    tail = response[-MAX_RESPONSE_CHARS:]
    boxed = _last_boxed(tail)
    if boxed is not None:
        return boxed.strip()
    matches = _ANSWER_RE.findall(tail)
    if not matches:
        return None
    return matches[-1].strip() or None


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces (None if absent or unbalanced)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None
