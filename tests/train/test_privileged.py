"""Privileged-context SFT examples of the warm starts (`rlvr_jax.train.privileged`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.rl import signals
from rlvr_jax.rl.config import SOLUTION_VIEW, apply_variant, default_config
from rlvr_jax.rl.methods import model_signals
from rlvr_jax.testing import toy_tokenizer
from rlvr_jax.train import privileged
from rlvr_jax.train.warmstart import SPECS, get_spec, model_dir, spec_payload


def _problems(n=40):
    return tasks.get("arithmetic", num_operands=3, max_operand=9, operators="+-").problems(n)


def test_share_and_views_are_exact_and_deterministic():
    problems = _problems(40)
    views = ("solution", "solution", "asserted_incorrect", "rephrase")
    ex = privileged.privileged_examples(problems, share=0.25, views=views, seed=3)
    assert ex == privileged.privileged_examples(problems, share=0.25, views=views, seed=3)
    assert ex != privileged.privileged_examples(problems, share=0.25, views=views, seed=4)
    plain = [(p.prompt, p.solution) for p in problems]
    changed = [i for i in range(40) if ex[i] != plain[i]]
    assert len(changed) == 10  # round(0.25 * 40); every arithmetic solution has integers
    kinds = []
    for i in changed:
        prompt, target = ex[i]
        p = problems[i]
        assert prompt.startswith(p.prompt + "\n")
        if "Reference solution:" in prompt:
            kinds.append("solution")
            assert prompt == SOLUTION_VIEW.format(prompt=p.prompt, solution=p.solution)
            assert target == p.solution
        elif "Rephrase" in prompt:
            kinds.append("rephrase")
            assert p.solution in prompt and target == p.solution
        else:
            kinds.append("asserted_incorrect")
            assert prompt.endswith("incorrect.") and target != p.solution
    # The chosen problems (in index order) cycle through the views.
    assert kinds == [views[j % 4] for j in range(10)]


def test_no_share_is_plain_and_bad_input_is_named():
    problems = _problems(5)
    assert privileged.privileged_examples(problems, share=0.0, views=(), seed=0) == [
        (p.prompt, p.solution) for p in problems
    ]
    with pytest.raises(ValueError, match="valid names"):
        privileged.privileged_examples(problems, share=0.5, views=("nope",), seed=0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        privileged.privileged_examples(problems, share=1.5, views=("solution",), seed=0)
    spec = get_spec("arithmetic", "base")
    with pytest.raises(ValueError, match="privileged_views"):
        dataclasses.replace(spec, privileged_views=("hint!",))
    with pytest.raises(ValueError, match="needs privileged_views"):
        dataclasses.replace(spec, privileged_views=())


def test_corrupt_solution_changes_exactly_one_integer():
    rng = np.random.default_rng(0)
    text = "9 - 7 = 2\n6 + 2 = 8\nAnswer: 8"
    for _ in range(200):
        bad = privileged.corrupt_solution(text, rng)
        a, b = re.findall(r"[0-9]+", text), re.findall(r"[0-9]+", bad)
        assert len(a) == len(b)
        diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
        assert len(diff) == 1 and 1 <= abs(int(diff[0][0]) - int(diff[0][1])) <= 3
        assert int(diff[0][1]) >= 0
    assert privileged.corrupt_solution("no digits", rng) is None


def test_views_are_the_ones_the_signals_and_experiments_use():
    from experiments.cscr import cscr
    from experiments.h2sd import h2sd

    assert privileged.SOLUTION_VIEW == SOLUTION_VIEW
    assert h2sd.HINT_VIEW == privileged.SOLUTION_VIEW
    assert h2sd.REPHRASE_VIEW == privileged.REPHRASE_VIEW
    c = cscr.get_config("pulse")
    assert c.score.cscr_shift.correct_template == privileged.ASSERTED_CORRECT_VIEW
    assert c.score.cscr_shift.incorrect_template == privileged.ASSERTED_INCORRECT_VIEW
    # On arithmetic, the hint signal's default view is the solution view.
    p = _problems(1)[0]
    task = tasks.get("arithmetic")
    default = f"{p.prompt}\n{task.hint(p)}"
    assert default == privileged.render_view(privileged.SOLUTION_VIEW, p)
    assert set(model_signals.TEMPLATE_FIELDS) >= {"prompt", "solution", "response"}


def test_privileged_fields_hash_only_when_set():
    spec = get_spec("arithmetic", "base")
    assert spec.privileged_share > 0 and spec_payload(spec)["privileged_share"] > 0
    plain = dataclasses.replace(spec, privileged_share=0.0, privileged_views=())
    assert "privileged_share" not in spec_payload(plain)
    assert "privileged_views" not in spec_payload(plain)
    tok = toy_tokenizer(128)
    assert model_dir(plain, tok) != model_dir(spec, tok)
    n = 50
    small = dataclasses.replace(spec, num_train_problems=n)
    ex = small.sft_examples()
    assert sum(
        p != q for (p, _), q in zip(ex, (x.prompt for x in small.task().problems(n)), strict=True)
    ) == round(spec.privileged_share * n)
    for key in SPECS:  # registered specs validate
        assert SPECS[key].privileged_share >= 0


# ------------------------------------------ experiments' self-teachers in distribution
def _scores_policy_under_a_view(c) -> bool:
    """Whether a config's signals run the policy itself under a privileged view."""
    names = signals.signal_names(c)
    if "hint" in names or "cscr_shift" in names:
        return True
    return any(n in names and c.score[n].source == "hint" for n in _TEACHER_SIGNALS)


_TEACHER_SIGNALS = ("teacher", "teacher_hidden", "teacher_topk")
_EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _experiment_configs():
    for path in sorted(_EXPERIMENTS.glob("*/*.py")):
        text = path.read_text()
        if path.stem == "repro" or "def get_config" not in text or "rl.config" not in text:
            continue
        spec = importlib.util.spec_from_file_location(f"_exp_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for variant in ("", "arithmetic"):
            try:
                c = module.get_config(variant)
            except ValueError:  # the file has no such variant
                continue
            yield f"{path.parent.name}/{path.stem}:{variant}", c


def test_every_self_teacher_experiment_runs_on_a_base_trained_in_its_views():
    # A policy scored under "Reference solution: ..." must have seen such prompts in SFT
    # (issue 12): its warm-start spec has a privileged share. Countdown's base has none,
    # so those experiments use the "privileged" role; a GRPO config keeps the plain base.
    checked = []
    for name, c in _experiment_configs():
        if c.model.source != "warm_start":
            continue
        spec = get_spec(c.model.domain, c.model.role)
        if _scores_policy_under_a_view(c):
            checked.append(name)
            assert spec.privileged_share > 0, (name, c.model.domain, c.model.role)
    assert {"dash/dash:", "cpo/cpo:", "cscr/cscr:", "h2sd/h2sd:", "h2sd/rlsd:"} <= set(checked)
    assert "dash/dash:arithmetic" in checked
    grpo = default_config()
    assert get_spec(grpo.model.domain, grpo.model.role).privileged_share == 0


def test_the_self_teacher_variant_switches_only_countdown():
    c = default_config()
    apply_variant(c, "", self_teacher=True)
    assert (c.model.domain, c.model.role) == ("countdown", "privileged")
    a = default_config()
    apply_variant(a, "arithmetic", self_teacher=True)
    assert (a.model.domain, a.model.role) == ("arithmetic", "base")
    spec, base = get_spec("countdown", "privileged"), get_spec("countdown", "base")
    assert spec.privileged_share == get_spec("arithmetic", "base").privileged_share > 0
    # Apart from the share and its role, the privileged model is the Countdown base.
    same = dataclasses.replace(spec, role="base", privileged_share=0.0, privileged_views=())
    assert same == base
