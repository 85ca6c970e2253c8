"""The coding papers' `:code` variants: the synthetic code task on its base, and a 2-step pulse.

Each of experiments/{gapo,vigor,rstg,saf_opd,iso} has `:code` (task and warm-start
domain code_synth; the distillation methods take the code_synth teacher) and
`:code,pulse`. The slow pulse trains 2 steps of a tiny random model on code_synth
prompts with rewards from the real sandbox: a random model writes no code block, so
each decoded response is replaced by the problem's reference program or by a wrong
one (by the parity of its tokens), and the task's `verify_batch` runs them.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import validate
from rlvr_jax.rollout import score

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
CODE_EXPERIMENTS = ("gapo/gapo", "vigor/vigor", "rstg/rstg", "saf_opd/saf_opd", "iso/iso")
TEACHERS = {"rstg/rstg", "saf_opd/saf_opd"}
WRONG = "```python\ndef f(x):\n    return x\n```"


def load(name: str, variant: str):
    spec = importlib.util.spec_from_file_location(
        name.replace("/", "_"), EXPERIMENTS / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


@pytest.mark.parametrize("name", CODE_EXPERIMENTS)
def test_code_variant_is_the_default_on_code_synth(name):
    default, code = load(name, ""), load(name, "code")
    validate(code)
    assert (code.task.name, code.model.domain, code.model.source) == (
        "code_synth", "code_synth", "warm_start"
    )  # fmt: skip
    if name in TEACHERS:  # the warm-start teacher of the policy's domain (code_synth)
        t = code.score.teacher
        assert (t.source, t.domain, t.role) == ("warm_start", "", "teacher")
    # Only the task and the domain differ from the default variant.
    code.task.name, code.model.domain = default.task.name, default.model.domain
    assert code.to_dict() == default.to_dict()


@pytest.mark.parametrize("name", CODE_EXPERIMENTS)
def test_code_pulse_is_the_pulse_on_code_synth(name):
    pulse, code_pulse = load(name, "pulse"), load(name, "code,pulse")
    validate(code_pulse)
    assert code_pulse.task.name == "code_synth" and code_pulse.model.source == "random"
    code_pulse.task.name = pulse.task.name
    assert code_pulse.to_dict() == pulse.to_dict()


def _sandbox_rewards(monkeypatch) -> list[list[float]]:
    """score_rows with each response replaced by a right or wrong program; returns the
    rewards of every call on a code_synth task."""
    real, seen = score.score_rows, []

    class _Script:
        def __init__(self, texts):
            self.texts = iter(texts)

        def decode(self, ids):
            del ids
            return next(self.texts)

    def scripted(task, tokenizer, problems_R, sampled_R, stop_ids):
        assert task.name == "code_synth"
        texts = [
            p.solution if sum(ids) % 2 else WRONG
            for p, ids in zip(problems_R, sampled_R, strict=True)
        ]
        verdicts = real(task, _Script(texts), problems_R, sampled_R, stop_ids)
        seen.append(list(verdicts.rewards))
        return verdicts

    monkeypatch.setattr(score, "score_rows", scripted)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("name", CODE_EXPERIMENTS)
def test_code_pulse_trains_two_steps_on_sandbox_rewards(name, tmp_path, monkeypatch):
    c = load(name, "code,pulse")
    c.eval.at_start = False
    c.checkpoint.export_final = False
    seen = _sandbox_rewards(monkeypatch)
    trainer_lib.train(c, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    assert all(np.isfinite(x["loss"]) for x in train if "loss" in x)
    rewards = np.concatenate(seen)
    assert set(rewards) == {0.0, 1.0}  # reference programs pass, f(x) = x fails
    assert all(0 < x["pass_rate"] < 1 for x in train)
