"""Synthetic coding problems for the CPU miniature: write a one-line-ish `f(x)`, run in the sandbox.

  "Write a Python function f(x) that returns 3 times x plus 2."
  ```python
  def f(x):
      return 3 * x + 2
  ```

A problem is drawn from (options, seed, split, index): a form, its constants
(1..`max_const`) and `num_tests` distinct inputs in 0..19 (a "conditional" form has
inputs on both sides of its threshold). Its tests assert `f(k) == v` for each input,
`v` computed here from the form, never by running code on the host.

Verification runs the response's last ```python block on the tests through the
code task's sandbox pool (`tasks.code.run_programs`). With `reward="all"` the asserts
are one test, so a response costs one sandbox run (~33 ms); `reward="fraction"`
runs each assert separately (`num_tests` runs) and rewards the share passed. Every
test ends by printing a per-problem sentinel that the prompt never shows, and passes
only when stdout is exactly that line: a program that exits before the asserts, or
prints its own output, fails. Building the task runs the sandbox's self-test and
refuses to start without isolation (SandboxUnavailable), as the `code` task does.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from rlvr_jax.sandbox import Limits, SandboxPool, TestCase
from rlvr_jax.tasks import Problem, Task, Verdict, register
from rlvr_jax.tasks.base import SPLITS
from rlvr_jax.tasks.code import REWARDS, run_programs, shared_pool

FORMS = ("linear", "conditional", "mod")
NUM_INPUTS = 20  # test inputs are 0..NUM_INPUTS-1
INSTRUCTION = "Put the code in one ```python code block."


@register
@dataclasses.dataclass(frozen=True)
class CodeSynth(Task):
    """Write `f(x)` from a description in words; its tests run in the sandbox.

    Attributes:
      forms: comma-separated subset of FORMS, drawn uniformly: "linear" (a*x + b or
        a*x - b), "conditional" (x + a if x > b, else x * c), "mod" (x * a % b).
      max_const: constants are drawn from 1..max_const (2..max_const for a modulus).
      num_tests: asserted inputs per problem (distinct, in 0..19).
      reward: "all" (1 if every assert passes) or "fraction" (share passed).
      workers: concurrent sandboxes of one verify call.
      cpu_seconds, wall_seconds, memory_mb: each sandbox run's limits.
    """

    name: ClassVar[str] = "code_synth"
    forms: str = "linear,conditional,mod"
    max_const: int = 9
    num_tests: int = 4
    reward: str = "all"
    workers: int = 2
    cpu_seconds: float = 2.0
    wall_seconds: float = 5.0
    memory_mb: int = 256

    def __post_init__(self):
        bad = [f for f in self.forms.split(",") if f not in FORMS]
        if not self.forms or bad:
            raise ValueError(f"task 'code_synth': forms {self.forms!r} has {bad}; valid: {FORMS}")
        if self.reward not in REWARDS:
            raise ValueError(f"task 'code_synth': reward {self.reward!r} unknown; valid: {REWARDS}")
        if not 2 <= self.max_const <= 99:
            raise ValueError(f"task 'code_synth': max_const must be in 2..99, got {self.max_const}")
        if not 2 <= self.num_tests <= NUM_INPUTS // 2:
            raise ValueError(
                f"task 'code_synth': num_tests must be in 2..{NUM_INPUTS // 2}, "
                f"got {self.num_tests}"
            )
        self.pool()  # refuses to start (SandboxUnavailable) when programs cannot be isolated

    def pool(self) -> SandboxPool:
        """The shared pool for these limits (built, and the sandbox checked, once)."""
        limits = Limits(cpu_seconds=self.cpu_seconds, wall_seconds=self.wall_seconds,
                        memory_mb=self.memory_mb)  # fmt: skip
        return shared_pool(self.workers, limits)

    def problem(self, index: int, split: str = "train") -> Problem:
        """The problem; metadata holds the form, constants, inputs, outputs, sentinel."""
        rng = self._rng(index, split)
        forms = self.forms.split(",")
        form = forms[int(rng.integers(len(forms)))]
        m = self.max_const
        a, b, c = (int(v) for v in rng.integers(1, m + 1, size=3))
        if form == "linear":
            sign = "+" if rng.random() < 0.5 else "-"
            words = f"{a} times x {'plus' if sign == '+' else 'minus'} {b}"
            body = f"    return {a} * x {sign} {b}"
            fn = (lambda x: a * x + b) if sign == "+" else (lambda x: a * x - b)
            inputs = rng.choice(NUM_INPUTS, self.num_tests, replace=False)
        elif form == "conditional":
            words = f"x plus {a} if x is greater than {b}, otherwise x times {c}"
            body = f"    if x > {b}:\n        return x + {a}\n    return x * {c}"
            fn = lambda x: x + a if x > b else x * c  # noqa: E731
            low = rng.choice(b + 1, min(b + 1, self.num_tests // 2), replace=False)
            high = rng.choice(
                np.arange(b + 1, NUM_INPUTS), self.num_tests - len(low), replace=False
            )
            inputs = np.concatenate([low, high])
        else:
            b = int(rng.integers(2, m + 1))
            words = f"x times {a} modulo {b}"
            body = f"    return x * {a} % {b}"
            fn = lambda x: x * a % b  # noqa: E731
            inputs = rng.choice(NUM_INPUTS, self.num_tests, replace=False)
        inputs = [int(x) for x in rng.permutation(inputs)]
        outputs = [int(fn(x)) for x in inputs]
        program = f"def f(x):\n{body}"
        pid = self.problem_id(index, split)
        prompt = f"Write a Python function f(x) that returns {words}.\n{INSTRUCTION}"
        sentinel = "ok " + hashlib.sha256(f"{self.seed}|{pid}".encode()).hexdigest()[:16]
        return Problem(
            id=pid,
            prompt=prompt,
            answer=program,
            solution=f"```python\n{program}\n```",
            metadata={"form": form, "constants": [a, b, c], "inputs": inputs,
                      "outputs": outputs, "sentinel": sentinel},
        )  # fmt: skip

    def tests(self, problem: Problem) -> tuple[TestCase, ...]:
        """The sandbox tests of `problem`: one run of all asserts (reward "all") or one per
        assert ("fraction"), each printing the sentinel last."""
        meta = problem.metadata
        asserts = [
            f"assert f({x}) == {v}" for x, v in zip(meta["inputs"], meta["outputs"], strict=True)
        ]
        groups = ["\n".join(asserts)] if self.reward == "all" else asserts
        end = f"print({meta['sentinel']!r})"
        return tuple(
            TestCase(assertion=f"{g}\n{end}", expected_stdout=meta["sentinel"]) for g in groups
        )

    def verify(self, problem: Problem, response: str) -> Verdict:
        """CORRECT when every assert passes; else WRONG_ANSWER (TIMEOUT when the first
        failing run ran out of time), reward 0 or the fraction passed; MALFORMED
        without a code block."""
        return self.verify_batch([problem], [response])[0]

    def verify_batch(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[Verdict]:
        """`verify` of each pair, every program in one `SandboxPool.run` call."""
        tests = [self.tests(p) for p in problems]
        return run_programs(self.pool(), tests, responses, fraction=self.reward == "fraction")

    def _rng(self, index: int, split: str) -> np.random.Generator:
        """`Task.rng` keyed by the seed and the problem options only: the verifier's
        options (reward, workers, limits) do not change the problems."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {SPLITS}")
        if index < 0:
            raise ValueError(f"problem index must be >= 0, got {index}")
        options = (self.seed, self.forms, self.max_const, self.num_tests)
        key = f"{self.name}|{options}|{split}|{index}"
        return np.random.default_rng(
            np.frombuffer(hashlib.sha256(key.encode()).digest()[:16], np.uint32)
        )
