"""The score signal "gar": GAR rewards from the current policy's signatures and expert anchors."""

import json
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.rl import build, signals
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.methods import gradient_signals as gs
from rlvr_jax.rollout import Groups, score
from rlvr_jax.testing import parity_score_rows, score_context
from rlvr_jax.train.sft import encode_example, encode_prompt

from .test_config import load_experiment


def _config():
    c = config_lib.default_config()
    config_lib.apply_variant(c, "pulse")
    c.score.signals = "gar"
    c.score.gar.chunk = 64  # several vocabulary chunks
    return c


def _groups(tokenizer, problems, group_size, rng, response_len=7):
    """Groups in the sampler layout: left-padded prompts, then random responses of any length."""
    prompts = [encode_prompt(tokenizer, p.prompt) for p in problems]
    lp = max(map(len, prompts))
    rows = len(problems) * group_size
    width = lp + response_len + 1
    tokens = np.zeros((rows, width), np.int32)
    attn = np.zeros((rows, width), bool)
    resp = np.zeros((rows, width), bool)
    for r in range(rows):
        pr = prompts[r // group_size]
        n = int(rng.integers(2, response_len + 1))
        tokens[r, lp - len(pr) : lp] = pr
        tokens[r, lp : lp + n] = rng.integers(3, tokenizer.vocab_size, n)
        attn[r, lp - len(pr) : lp + n] = True
        resp[r, lp : lp + n] = True
    zeros = np.zeros((rows, width), np.float32)
    return Groups(
        tokens=tokens,
        attention_mask=attn,
        prompt_mask=attn & ~resp,
        response_mask=resp,
        behaviour_logps=zeros,
        entropy=zeros,
        group=np.repeat(np.arange(len(problems)), group_size).astype(np.int32),
        valid=np.ones(rows, bool),
        rewards=zeros[:, 0],
        correct=np.zeros(rows, bool),
        stopped=np.ones(rows, bool),
        reasons=["correct"] * rows,
        problems=list(problems),
    )


def _direct_signatures(model, tokenizer, groups, variant):
    """Unchunked, unjitted signatures; anchors right-padded (`encode_example`), not left-padded."""
    sig = gs.gar_signatures_from_model(
        model, groups.tokens, groups.attention_mask, groups.response_mask, variant=variant
    )
    enc = [encode_example(tokenizer, p.prompt, p.solution) for p in groups.problems]
    s = max(len(ids) for ids, _ in enc)
    a_tok = np.zeros((len(enc), s), np.int32)
    a_attn = np.zeros((len(enc), s), bool)
    a_mask = np.zeros((len(enc), s), bool)
    for i, (ids, m) in enumerate(enc):
        a_tok[i, : len(ids)], a_attn[i, : len(ids)], a_mask[i, : len(ids)] = ids, True, m
    anchors = gs.gar_signatures_from_model(model, a_tok, a_attn, a_mask, variant=variant)
    return np.asarray(sig), np.asarray(anchors)


# "grad" shares the code path (the variant only reaches `core.gar`, tested there).
def test_gar_signal_matches_the_kernels_on_the_same_rows(variant="grad_hidden"):
    c = _config()
    c.score.gar.variant = variant
    c.score.gar.beta = 0.7
    config_lib.validate(c)
    model, tokenizer = build.build_policy(c)
    task = build.build_task(c)
    problems = [task.problem(i) for i in range(3)]
    g = _groups(tokenizer, problems, 4, np.random.default_rng(0))
    g.correct = np.array([1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0], bool)
    g.valid[-1] = False
    # Shaped rewards: passing rows 1 (+ an overlong penalty on one), failing ones 0 or penalised.
    g.rewards = g.correct.astype(np.float32)
    g.rewards[[1, 2]] -= 0.25
    ctx = score_context(model, tokenizer, task, chunk=4)  # 3 row chunks of rollouts
    batch = dict(rewards_B=g.rewards, correct_B=g.correct, group_B=g.group, valid_B=g.valid)
    out = gs.gar_signal(ctx, g, batch, **c.score.gar.to_dict())
    assert set(out) == {"rewards_B"}

    sig, anchors = _direct_signatures(model, tokenizer, g, variant)
    want, _ = gs.gar_rewards_from_signatures(
        sig, anchors[:, None], np.ones((3, 1), bool), g.group, g.correct, beta=0.7, valid_B=g.valid
    )
    want = np.asarray(want)
    got = out["rewards_B"]
    passed = g.correct & g.valid
    # Passing rows: their reward plus the GAR bonus β·max(0, a − mean a) = want − 1.
    np.testing.assert_allclose(got[passed], g.rewards[passed] + want[passed] - 1, atol=2e-5)
    assert np.all(got[passed] >= g.rewards[passed]) and np.any(got[passed] > g.rewards[passed])
    # Failing (and invalid) rows keep their reward exactly.
    np.testing.assert_array_equal(got[~passed], g.rewards[~passed])
    # With the verifier's 0/1 rewards the signal is exactly GAR's reward.
    batch["rewards_B"] = passed.astype(np.float32)
    got = gs.gar_signal(ctx, g, batch, **c.score.gar.to_dict())["rewards_B"]
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_anchor_rows_layout():
    c = _config()
    _, tokenizer = build.build_policy(c)
    task = build.build_task(c)
    p = [task.problem(0), task.problem(1)]
    p[1] = type(p[1])(id="x", prompt=p[1].prompt + " and more", answer="1", solution="")
    tokens, attn, mask, has = gs.anchor_rows(tokenizer, p, pad_id=0, multiple=32)
    assert tokens.shape[1] % 32 == 0 and has.tolist() == [True, False]
    ids, m = encode_example(tokenizer, p[0].prompt, p[0].solution)
    np.testing.assert_array_equal(tokens[0][attn[0]], ids)
    np.testing.assert_array_equal(mask[0][attn[0]], m)
    assert not mask[1].any() and attn[1].sum() == len(encode_prompt(tokenizer, p[1].prompt))
    # Prompts end at one column (left padding), solutions start there.
    assert np.flatnonzero(mask[0])[0] == np.flatnonzero(attn[1])[-1] + 1


@pytest.mark.slow
def test_gar_signal_trainer_pulse(tmp_path, monkeypatch):
    c = load_experiment("grpo", "pulse")
    c.score.signals = "gar"
    c.eval.at_start = False
    seen = []
    original_compute = signals.compute

    def compute(ctx, groups, batch, names, options):
        out = original_compute(ctx, groups, batch, names, options)
        seen.append((batch["rewards_B"].copy(), batch["correct_B"] & batch["valid_B"], out))
        return out

    # A random model never solves a task: pass rows by parity so GAR has passing rollouts.
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    monkeypatch.setattr(signals, "compute", compute)
    trainer_lib.train(c, tmp_path)
    assert len(seen) == 2
    for before, passed, out in seen:
        after = out["rewards_B"]
        np.testing.assert_array_equal(after[~passed], before[~passed])
        bonus = after[passed] - before[passed]
        assert np.all(bonus >= 0) and np.all(bonus <= 2 * c.score.gar.beta + 1e-6)
    assert any(np.any(after[passed] > before[passed]) for before, passed, out in seen)
    lines = [json.loads(x) for x in (Path(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    assert all(np.isfinite(x["loss"]) and x["grad_norm"] > 0 for x in train)
