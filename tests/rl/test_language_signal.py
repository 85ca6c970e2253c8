"""The reasoning-language reward signal: the bonus by hand, per-problem targets, errors."""

import types

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods.language import language_bonus
from rlvr_jax.train.warmstart import default_tokenizer

EN = "3 plus 4 is 7\nAnswer: 7"
ES = "3 más 4 es 7\nRespuesta: 7"
DE = "3 plus 4 ist 7\nAntwort: 7"


def test_language_bonus_by_hand():
    got = language_bonus([EN, ES, DE, None], ["en", "en", "de", "en"], 0.5)
    np.testing.assert_array_equal(got, [0.5, 0.0, 0.5, 0.0])


def _step(texts, problems, group, valid):
    """A ScoreContext and Groups stand-in: rows = the encoded texts, right-padded."""
    tok = default_tokenizer()
    ids = [tok.encode(t) for t in texts]
    width = max(map(len, ids)) + 1
    tokens = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), bool)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = True
    groups = types.SimpleNamespace(
        tokens=tokens,
        response_mask=mask,
        valid=np.asarray(valid),
        group=np.asarray(group),
        problems=problems,
    )
    task = types.SimpleNamespace(name="multilingual_mix")
    ctx = signals.ScoreContext(tok, task, policy=None)
    return ctx, groups


def test_signal_adds_the_bonus_to_the_reward_toward_each_prompts_language():
    task = tasks.get("multilingual_mix", num_operands=2)
    en, es = task.problem(0), task.problem(1)  # languages en, es
    ctx, groups = _step([EN, ES, EN, ES], [en, es], group=[0, 0, 1, 1], valid=[1, 1, 1, 0])
    batch = {"rewards_B": np.array([1.0, 0.0, 1.0, 1.0], np.float32)}
    fn = signals.SIGNALS.get("language").fn
    out = fn(ctx, groups, batch, weight=0.25, language="")
    # Rows 0, 1 answer the English problem: EN gets the bonus; rows 2, 3 the Spanish one:
    # EN gets none, row 3 is invalid (no bonus).
    np.testing.assert_allclose(out["rewards_B"], [1.25, 0.0, 1.0, 1.0])
    fixed = fn(ctx, groups, batch, weight=0.25, language="es")["rewards_B"]
    np.testing.assert_allclose(fixed, [1.0, 0.25, 1.0, 1.0])


def test_signal_errors():
    task = tasks.get("multilingual_mix", num_operands=2)
    ctx, groups = _step([EN], [task.problem(0)], group=[0], valid=[1])
    fn = signals.SIGNALS.get("language").fn
    batch = {"rewards_B": np.zeros(1, np.float32)}
    with pytest.raises(ValueError, match="language = 'xx'"):
        fn(ctx, groups, batch, weight=1.0, language="xx")
    plain = tasks.get("arithmetic").problem(0)
    ctx, groups = _step([EN], [plain], group=[0], valid=[1])
    with pytest.raises(ValueError, match="no problem language"):
        fn(ctx, groups, batch, weight=1.0, language="")
