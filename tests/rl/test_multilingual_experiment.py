"""experiments/multilingual: every language variant; the pulse adds the language reward on the
reward path (rewards = verifier + w·1[language])."""

import json

import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import validate
from rlvr_jax.rl.methods import language as language_lib

from .test_method_experiments import load
from .test_trainer import _parity_rewards


@pytest.mark.parametrize("variant", ["", "en", "fr", "de", "pulse", "de,pulse"])
def test_multilingual_config(variant):
    c = load("multilingual/multilingual", variant)
    validate(c)
    want = variant.split(",")[0] if variant not in ("", "pulse") else "es"
    assert json.loads(c.task.options)["language"] == want
    assert c.task.name == "multilingual_arithmetic" and c.score.signals == "language"
    assert c.model.source == ("random" if "pulse" in variant else "warm_start")
    if "pulse" not in variant:
        assert c.model.domain == "multilingual_mix"
    with pytest.raises(ValueError, match="variant 'xx'"):
        load("multilingual/multilingual", "xx")


@pytest.mark.slow
def test_multilingual_pulse_adds_the_language_reward(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    # A random policy reasons in no language: call every even-length response on target.
    monkeypatch.setattr(
        language_lib, "language_reward", lambda text, lang: float(len(text) % 2 == 0)
    )
    batches = []
    original = trainer_lib.Trainer.score

    def keep(self, groups, fields, step):
        b = original(self, groups, fields, step)
        texts = [
            self.parts.tokenizer.decode(
                [
                    t
                    for t in groups.tokens[i][groups.response_mask[i]]
                    if t not in self.parts.tokenizer.stop_ids
                ]
            )
            for i in range(len(groups.tokens))
        ]
        batches.append((np.asarray(b["rewards_B"]), groups.rewards.copy(), texts))
        return b

    monkeypatch.setattr(trainer_lib.Trainer, "score", keep)
    c = load("multilingual/multilingual", "pulse")
    trainer_lib.train(c, tmp_path)
    assert len(batches) == 2
    w = c.score.language.weight
    for rewards, verifier, texts in batches:
        bonus = np.array([w * (len(t) % 2 == 0) for t in texts], np.float32)
        np.testing.assert_allclose(rewards, verifier + bonus, atol=1e-6)
        assert bonus.any()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("language_consistency" in x for x in lines if x["split"] != "train")
