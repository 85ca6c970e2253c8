"""Task.group_metrics: Countdown's coverage and entrance entropy, multilingual language
consistency, and their means in evaluate_task."""

import dataclasses
import math
from typing import ClassVar

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.models import init_model
from rlvr_jax.tasks.base import CORRECT, Problem, Task, Verdict
from rlvr_jax.tasks.countdown import family_entropy
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train.evaluate import evaluate_task

COUNTDOWN = dict(num_numbers=3, max_number=10, target_min=1, target_max=30)


def test_family_entropy_by_hand():
    fams = [("1", "+"), ("1", "+"), ("2", "*"), None]
    p = np.array([2 / 3, 1 / 3])
    assert family_entropy(fams) == pytest.approx(float(-(p * np.log(p)).sum()))
    assert family_entropy([None, ("3", "-")]) == 0.0
    assert family_entropy([]) == 0.0


def test_countdown_group_metrics():
    task = tasks.get("countdown", **COUNTDOWN)
    problem = task.problem(2, "test")  # 3 7 4 -> 1: 6 solutions, families "7 -" and "4 +"
    assert problem.metadata["num_solutions"] == 6
    responses = [
        "7 - 3 = 4\n4 / 4 = 1\nAnswer: (7-3)/4",
        "7 - 3 = 4\n4 / 4 = 1\nAnswer: (7 - 3) / 4",  # the same canonical solution
        "4 + 3 = 7\n7 / 7 = 1\nAnswer: (4+3)/7",
        "7 - 4 = 3\nAnswer: 3",  # malformed (numbers unused)
        "no steps at all",
    ]
    m = task.group_metrics(problem, responses)
    assert m["coverage"] == pytest.approx(2 / 6)
    p = np.array([3 / 4, 1 / 4])  # four step lines: 7 - (x3), 4 + (x1)
    assert m["entrance_entropy"] == pytest.approx(float(-(p * np.log(p)).sum()))
    assert m["entrance_families"] == 2.0


def test_multilingual_language_consistency():
    task = tasks.get("multilingual_arithmetic", language="es", num_operands=2)
    problem = task.problem(0, "test")
    spanish, english = problem.solution, "3 plus 4 is 7\nAnswer: 7"
    m = task.group_metrics(problem, [spanish, spanish, english, ""])
    assert m == {"language_consistency": 0.5}


@dataclasses.dataclass(frozen=True)
class _LengthStats(Task):
    """Stub: every response correct; group metrics from the responses' lengths."""

    name: ClassVar[str] = "stub_length_stats"
    seen: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def problem(self, index, split="train"):
        return Problem(self.problem_id(index, split), f"q{index}", "", "")

    def verify(self, problem, response):
        return Verdict(1.0, CORRECT)

    def group_metrics(self, problem, responses):
        self.seen.append(responses)
        out = {"mean_chars": float(np.mean([len(r) for r in responses]))}
        if problem.id.endswith("/0"):
            out["only_first"] = 7.0
        return out


def test_evaluate_task_averages_group_metrics_over_problems():
    task = _LengthStats()
    model = init_model(tiny_config(), seed=0)
    out = evaluate_task(
        model, toy_tokenizer(128), task, num_problems=3, n_samples=2, max_new_tokens=5
    )
    assert len(task.seen) == 3 and all(len(r) == 2 for r in task.seen)
    want = np.mean([np.mean([len(r) for r in rs]) for rs in task.seen])
    assert out["task_metrics"]["mean_chars"] == pytest.approx(want)
    assert out["task_metrics"]["only_first"] == 7.0  # averaged over the problems that have it
    assert not math.isnan(out["pass@1"])
