"""Cliff's judge: its training labels, its answer parser and the line -> token mapping."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.train import judge

_TASK = tasks.get("arithmetic", num_operands=3, max_operand=9, operators="+-")


@pytest.mark.parametrize(
    "text, want",
    [
        ("Line 2", 2),
        ("line:3 because", 3),
        ("The first wrong one is LINE #1.", 1),
        ("None", judge.NO_MISTAKE),
        ("none of them", judge.NO_MISTAKE),
        ("Line 2, not None", 2),  # a line number wins over "none"
        ("Line 0", None),
        ("Lines 2", None),
        ("2", None),
        ("", None),
        ("nonesuch", None),
        ("Line 99999", None),  # more than 4 digits: not a line
        ("x" * 300 + "Line 2", None),  # only the first 200 characters are read
        ("__import__('os').system('x')", None),
    ],
)
def test_parse_judgement_is_robust(text, want):
    assert judge.parse_judgement(text) == want


def test_exact_labels_by_hand():
    p = _TASK.problems(1)[0]  # 6 + (9 - 7): "9 - 7 = 2\n6 + 2 = 8\nAnswer: 8"
    assert p.solution == "9 - 7 = 2\n6 + 2 = 8\nAnswer: 8"
    loc = _TASK.first_wrong_step
    assert judge.exact_label(loc, p, p.solution) == judge.NO_MISTAKE
    assert judge.exact_label(loc, p, "9 - 7 = 3\n6 + 3 = 9\nAnswer: 9") == 1
    assert judge.exact_label(loc, p, "9 - 7 = 2\n6 + 2 = 9\nAnswer: 9") == 2
    assert judge.exact_label(loc, p, "9 - 7 = 2\n6 + 2 = 8\nAnswer: 9") == 3
    assert judge.exact_label(loc, p, "9 - 7 = 2") == 2  # missing step: the line after the last
    assert judge.exact_label(loc, p, "9 - 7 = 2\n") == 2


def test_line_start_maps_lines_and_the_end():
    text = "ab\ncd\nAnswer: 1"
    assert [judge.line_start(text, k) for k in (1, 2, 3, 4, 0)] == [0, 3, 6, len(text), len(text)]


def test_judge_examples_mix_and_agree_with_the_locator():
    problems = _TASK.problems(300)
    ex = judge.judge_examples(_TASK, problems, seed=0)
    assert ex == judge.judge_examples(_TASK, problems, seed=0)
    counts = Counter(t for _, t in ex)
    assert 0.2 < counts["None"] / 300 < 0.5  # ~1/3 references (+ corruptions that stay right)
    assert {"Line 1", "Line 2", "Line 3"} <= set(counts)
    for p, (prompt, target) in zip(problems, ex, strict=True):
        text = prompt.split("Candidate solution:\n", 1)[1].rsplit("\nWhich line", 1)[0]
        assert prompt.startswith(p.prompt)
        assert target == judge.judge_target(judge.exact_label(_TASK.first_wrong_step, p, text))
        assert judge.parse_judgement(target) == judge.exact_label(_TASK.first_wrong_step, p, text)


def test_noisy_locator_moves_the_stated_share_to_other_tokens():
    from rlvr_jax.rl.methods.locators import noisy_first_mistakes

    rng = np.random.default_rng(0)
    first = np.array([3, -1, 0, 7] * 2000)
    lengths = np.array([10, 10, 0, 7] * 2000)  # rows 2, 6, ...: one position, never move
    out = noisy_first_mistakes(first, lengths, 0.3, rng)
    assert (out[first == -1] == -1).all()
    moved = out != first
    assert not moved[2::4].any()
    share = moved[(first >= 0) & (lengths > 0)].mean()
    assert share == pytest.approx(0.3, abs=0.02)
    assert (out[moved] <= lengths[moved]).all()
    assert np.array_equal(noisy_first_mistakes(first, lengths, 0.0, rng), first)
    # Moved indices spread over every other position of the row (0..10 without 3).
    assert set(out[0::4][moved[0::4]]) == set(range(11)) - {3}
