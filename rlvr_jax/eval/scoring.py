"""Scoring sampled responses: math answers, option letters, and programs in the sandbox.

Every scorer returns one `SampleScore` per response. `correct` feeds pass@k and
avg@k; `score` is 1/0 for math and choice and the fraction of tests passed for
code (the "average test pass rate"); `vote` is what maj@k counts (a final answer,
equivalent answers sharing one key, or a letter; None abstains).

Math answers go through the `math_file` task's verifier (the repo's math-verify
checker processes with their per-check time limit, `timeout_s`), so a suite and
training score an answer alike. Programs run only in `rlvr_jax.sandbox`, which
is imported when the first program is scored; a test passes in a stand-in with
the same interface (`sandbox=`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rlvr_jax.eval.items import Item
from rlvr_jax.eval.prompts import extract_letter, extract_program
from rlvr_jax.tasks.base import CORRECT, Problem, extract_answer
from rlvr_jax.tasks.math_answers import normalise, strip_wrappers
from rlvr_jax.tasks.math_data import MathFileTask, answers_equivalent


@dataclasses.dataclass(frozen=True)
class SampleScore:
    """The verdict on one response.

    Attributes:
      correct: the answer is right / every test passed.
      score: 1.0 or 0.0, or for code the fraction of tests passed.
      vote: the key maj@k counts (normalised answer or letter); None abstains.
      status: the verifier's reason (math), "correct"/"wrong"/"no_answer" (choice),
        the sandbox status or "no_program" (code).
    """

    correct: bool
    score: float
    vote: str | None
    status: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# At most this many checker comparisons per problem group its wrong answers into votes;
# past it, the remaining answers vote by their normalised string.
MAX_VOTE_CHECKS = 256


def score_math(item: Item, texts: Sequence[str], *, timeout_s: float = 1.0) -> list[SampleScore]:
    """Checks each response's final answer (last \\boxed{}, else "Answer:") with `item.answer`;
    votes group equivalent answers (`math_votes`)."""
    task = MathFileTask(timeout_s=timeout_s)
    problem = Problem(id=item.id, prompt=item.body, answer=item.answer, solution="")
    verdicts = [task.verify(problem, text) for text in texts]
    correct = [v.reason == CORRECT for v in verdicts]
    votes = math_votes(task, [extract_answer(t) for t in texts], correct)
    return [SampleScore(ok, float(ok), vote, v.reason)
            for ok, vote, v in zip(correct, votes, verdicts, strict=True)]  # fmt: skip


def math_votes(task: MathFileTask, answers: Sequence[str | None], correct: Sequence[bool]):
    """maj@k's vote key of each final answer: equivalent answers share one key.

    Every correct answer takes the first correct answer's key (each is equivalent to
    the gold answer); a wrong answer takes the key of the first earlier wrong answer
    the checker finds it equivalent to (`answers_equivalent`: so `0.5` and
    `\\frac{1}{2}` are one vote), else its own normalised string. No answer: None.
    """
    keys, reps, checks, right = [], [], 0, None
    for ans, ok in zip(answers, correct, strict=True):
        key = normalise(strip_wrappers(ans)) if ans else ""
        if not key:
            keys.append(None)
            continue
        if ok:
            right = right or key
            keys.append(right)
            continue
        match = next((k for k, _ in reps if k == key), None)
        for k, raw in reps if match is None else ():
            if checks >= MAX_VOTE_CHECKS:
                break
            checks += 1
            if answers_equivalent(task, raw, ans):
                match = k
                break
        if match is None:
            reps.append((key, ans))
        keys.append(match or key)
    return keys


def score_choice(item: Item, texts: Sequence[str]) -> list[SampleScore]:
    """Compares each response's option letter (see `extract_letter`) with `item.answer`."""
    out = []
    for text in texts:
        letter = extract_letter(text, len(item.options))
        ok = letter == item.answer
        status = "no_answer" if letter is None else "correct" if ok else "wrong"
        out.append(SampleScore(ok, float(ok), letter, status))
    return out


def build_program(item: Item, code: str) -> str:
    """The program run for `code`: MBPP+'s imports before it; HumanEval+'s prompt when the
    code does not define the entry point itself."""
    if item.entry_point:
        if f"def {item.entry_point}" in code:
            return code
        return item.program_prefix + code
    return f"{item.program_prefix}\n{code}" if item.program_prefix else code


def _import_sandbox():
    """rlvr_jax.sandbox, or a RuntimeError saying the code suite needs it."""
    try:
        from rlvr_jax import sandbox  # lazy: the math and science suites never need it
    except ImportError as e:
        raise RuntimeError(
            "the code suite runs programs only in rlvr_jax.sandbox, which is not importable "
            f"here ({e})"
        ) from e
    return sandbox


class CodeScorer:
    """Runs the programs of responses with their item's tests in a sandbox pool.

    Args:
      workers: the pool's concurrency.
      limits: keyword arguments of the sandbox's `Limits` (None: its defaults).
      sandbox: a module-like object with SandboxPool, CodeJob, TestCase, Limits and
        check_available (default: rlvr_jax.sandbox, imported on first use).
    """

    def __init__(self, workers: int = 4, limits: dict | None = None, sandbox=None):
        self.workers, self.limits, self._sandbox, self._pool = (
            workers,
            dict(limits or {}),
            sandbox,
            None,
        )

    def check(self) -> None:
        """Imports the sandbox and checks that it isolates, before any sampling is spent.

        Raises:
          RuntimeError saying what is missing.
        """
        self._ready()

    def _ready(self):
        if self._pool is None:
            sb = self._sandbox or _import_sandbox()
            verdict = sb.check_available()  # may raise itself, saying what is missing
            if verdict is False or (verdict not in (None, True) and verdict):
                why = "" if verdict is False else f": {verdict}"
                raise RuntimeError(f"the sandbox cannot isolate programs on this machine{why}")
            self._sandbox, self._pool = sb, sb.SandboxPool(self.workers)
        return self._sandbox, self._pool

    def score(self, item: Item, texts: Sequence[str]) -> list[SampleScore]:
        """One SampleScore per response; a response without a fenced program fails unrun."""
        programs = [extract_program(t) for t in texts]
        todo = [i for i, p in enumerate(programs) if p is not None]
        out = [SampleScore(False, 0.0, None, "no_program") for _ in texts]
        if not todo:
            return out
        sb, pool = self._ready()
        tests = tuple(
            sb.TestCase(stdin=t.stdin, expected_stdout=t.expected_stdout)
            if t.assertion is None else sb.TestCase(assertion=t.assertion)
            for t in item.tests
        )  # fmt: skip
        jobs = [
            sb.CodeJob(
                build_program(item, programs[i]), tests=tests, limits=sb.Limits(**self.limits)
            )
            for i in todo
        ]
        for i, result in zip(todo, pool.run(jobs), strict=True):
            ok = bool(result.all_passed)
            out[i] = SampleScore(ok, float(result.pass_fraction), None, str(result.status))
        return out
