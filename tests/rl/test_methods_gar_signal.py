"""The score signal "gar": GAR rewards from the current policy's signatures and expert anchors."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.core import gar as gar_lib
from rlvr_jax.models import init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import build, signals
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.methods import gar_signal as gs
from rlvr_jax.rollout import Groups, score
from rlvr_jax.testing import parity_score_rows, score_context, tiny_config
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


def _anchor_signatures(model, tokenizer, problems, variant):
    """Unchunked, unjitted anchor signatures, right-padded (`encode_example`), not left-padded."""
    enc = [encode_example(tokenizer, p.prompt, p.solution) for p in problems]
    s = max(len(ids) for ids, _ in enc)
    a_tok = np.zeros((len(enc), s), np.int32)
    a_attn = np.zeros((len(enc), s), bool)
    a_mask = np.zeros((len(enc), s), bool)
    for i, (ids, m) in enumerate(enc):
        a_tok[i, : len(ids)], a_attn[i, : len(ids)], a_mask[i, : len(ids)] = ids, True, m
    return np.asarray(gs.gar_signatures_from_model(model, a_tok, a_attn, a_mask, variant=variant))


def _ref_gar(sig, anchor, aux, groups, passed, beta, w=0.5):
    """The reference's rule in NumPy: best cosine per anchor kind, real + w·max(0, aux − real),
    the group mean of passing rows subtracted only when ≥ 2 pass, then 1 + β·max(0, ·)."""
    cos = lambda u, v: float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
    raw = np.zeros(len(sig))
    for i in range(len(sig)):
        real = cos(sig[i], anchor[groups[i]])
        alts = [cos(sig[i], a) for a in aux[groups[i]]]
        raw[i] = real + w * max(0.0, max(alts) - real) if alts else real
    out = np.zeros(len(sig))
    for i in np.flatnonzero(passed):
        peers = raw[passed & (groups == groups[i])]
        mean = peers.mean() if peers.size >= 2 else 0.0
        out[i] = 1.0 + beta * max(0.0, raw[i] - mean)
    return out, raw


# "grad" shares the code path (the variant only reaches `core.gar`, tested there).
def test_gar_signal_matches_the_reference_rule_on_the_same_rows(variant="grad_hidden"):
    c = _config()
    c.task.name = "countdown"  # alternative solutions: auxiliary anchors
    c.score.gar.variant = variant
    c.score.gar.beta = 0.7
    c.score.gar.aux_anchors = 2
    config_lib.validate(c)
    model, tokenizer = build.build_policy(c)
    task = build.build_task(c)
    problems = [task.problem(i) for i in range(3)]
    aux_texts = [task.alternative_solutions(p, 2) for p in problems]
    assert any(aux_texts) and not all(aux_texts)  # both kinds of group
    g = _groups(tokenizer, problems, 4, np.random.default_rng(0))
    # Group 0: two pass (centred); group 1: one passes (absolute cosine); group 2: three
    # pass, one of them a padding row.
    g.correct = np.array([1, 1, 0, 0, 0, 0, 1, 0, 1, 1, 1, 0], bool)
    g.valid[-2] = False
    # Shaped rewards: passing rows 1 (+ an overlong penalty on one), failing ones 0 or penalised.
    g.rewards = g.correct.astype(np.float32)
    g.rewards[[1, 2]] -= 0.25
    ctx = score_context(model, tokenizer, task, chunk=4)  # 3 row chunks of rollouts
    mask = g.response_mask & g.valid[:, None]
    batch = dict(
        rewards_B=g.rewards, correct_B=g.correct, group_B=g.group, valid_B=g.valid, mask_BxT=mask
    )
    out = gs.gar_signal(ctx, g, batch, **c.score.gar.to_dict())
    assert set(out) == {"rewards_B", "old_logps_BxT"}

    sig = np.asarray(
        gs.gar_signatures_from_model(
            model, g.tokens, g.attention_mask, g.response_mask, variant=variant
        )
    )
    anchors = _anchor_signatures(model, tokenizer, problems, variant)
    aux = [
        list(
            _anchor_signatures(
                model, tokenizer, [dataclasses.replace(p, solution=a) for a in t], variant
            )
        )
        if t
        else []
        for p, t in zip(problems, aux_texts, strict=True)
    ]
    passed = g.correct & g.valid
    want, raw = _ref_gar(sig, anchors, aux, g.group, passed, beta=0.7)
    got = out["rewards_B"]
    # Passing rows: their reward plus the GAR bonus = want − 1.
    np.testing.assert_allclose(got[passed], g.rewards[passed] + want[passed] - 1, atol=2e-5)
    assert np.any(got[passed] > g.rewards[passed])
    # The lone passing row of group 1 is rewarded by its absolute cosine, not 0.
    np.testing.assert_allclose(got[6], 1.0 + 0.7 * max(raw[6], 0.0), atol=2e-5)
    # Failing (and invalid) rows keep their reward exactly.
    np.testing.assert_array_equal(got[~passed], g.rewards[~passed])
    # With the verifier's 0/1 rewards the signal is exactly GAR's reward.
    batch["rewards_B"] = passed.astype(np.float32)
    got = gs.gar_signal(ctx, g, batch, **c.score.gar.to_dict())["rewards_B"]
    np.testing.assert_allclose(got, want, atol=2e-5)
    # The same forward pass gave the trainer's old log-probs.
    want_logps = np.where(mask, token_logps(model, g.tokens, g.attention_mask), 0.0)
    np.testing.assert_allclose(out["old_logps_BxT"], want_logps, rtol=1e-5, atol=1e-5)


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


def _ref_signature(logits, hidden, w_dv, tokens, attn, mask, variant):
    """From the model's full logits (no chunking), in float64."""
    logits, hidden, w_dv = (np.asarray(x, np.float64) for x in (logits, hidden, w_dv))
    out = []
    for i in range(tokens.shape[0]):
        s = np.zeros(w_dv.shape[0])
        for t in range(1, tokens.shape[1]):
            if mask[i, t] and attn[i, t]:
                z = logits[i, t - 1]
                p = np.exp(z - z.max())
                p /= p.sum()
                p[tokens[i, t]] -= 1
                g = w_dv @ p
                s += g * hidden[i, t - 1] if variant == "grad_hidden" else g
        n = np.linalg.norm(s)
        out.append(s / n if n > 0 else s)
    return np.array(out)


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])  # untied and tied output projection
def test_gar_signatures_from_model_match_full_logits(family):
    graphdef, state = nnx.split(init_model(tiny_config(family), seed=0))
    rng = np.random.default_rng(0)
    b, t = 4, 9
    tokens = rng.integers(3, 120, (b, t)).astype(np.int32)
    attn = np.ones((b, t), bool)
    attn[1, :3] = False  # left padding
    mask = np.zeros((b, t), bool)
    mask[:, 5:] = True
    mask[3] = False  # no response token

    @jax.jit
    def run(state):
        model = nnx.merge(graphdef, state)
        out = model.forward(tokens, attn, return_hidden=True)
        sigs = [
            gs.gar_signatures_from_model(model, tokens, attn, mask, variant=v, chunk=40)
            for v in gar_lib.VARIANTS
        ]
        fused = gs.gar_signatures_from_model(model, tokens, attn, mask, chunk=40, with_logps=True)
        return (
            out.logits,
            out.hidden,
            model.output_kernel(),
            sigs,
            fused,
            token_logps(model, tokens, attn),
        )

    logits, hidden, w_dv, sigs, (fused_sig, fused_logps), logps = run(state)
    for variant, got in zip(gar_lib.VARIANTS, sigs, strict=True):
        want = _ref_signature(logits, hidden, w_dv, tokens, attn, mask, variant)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # model matmuls in f32
        assert np.all(np.asarray(got[3]) == 0)
    # One forward pass, both outputs: the signature and the scorer's log-probs.
    np.testing.assert_allclose(fused_sig, sigs[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(  # on the response tokens (what the trainer keeps)
        np.where(mask, fused_logps, 0), np.where(mask, logps, 0), rtol=1e-6, atol=1e-6
    )


def test_gar_rewards_from_signatures():
    rng = np.random.default_rng(3)
    g, k, per, d = 2, 2, 3, 5
    sig = rng.normal(size=(g * per, d)).astype(np.float32)
    anchors = rng.normal(size=(g, k, d)).astype(np.float32)
    valid = np.array([[True, True], [True, False]])
    group = np.repeat(np.arange(g), per).astype(np.int32)
    correct = np.array([1, 1, 0, 1, 1, 1], bool)
    kw = dict(beta=0.5, min_group=1)
    rewards, align = gs.gar_rewards_from_signatures(sig, anchors, valid, group, correct, **kw)
    want_align, has = gar_lib.anchor_alignment(
        sig, jnp.asarray(anchors)[group], jnp.asarray(valid)[group]
    )
    np.testing.assert_allclose(align, want_align, rtol=1e-6)
    np.testing.assert_allclose(
        rewards, gar_lib.gar_rewards(want_align, correct, group, g, **kw), rtol=1e-6
    )
    # Jittable end to end.
    jitted = jax.jit(gs.gar_rewards_from_signatures)
    np.testing.assert_allclose(jitted(sig, anchors, valid, group, correct)[0], rewards, rtol=1e-6)


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


def test_gar_options_are_checked_before_any_work():
    entry = signals.SIGNALS.get("gar")
    for bad, match in (
        ({"aux_combine": "mean"}, "aux_combine = 'mean'; valid: aux_residual"),
        ({"variant": "hidden"}, "variant = 'hidden'; valid: grad_hidden, grad"),
        ({"min_group": 0}, "min_group = 0 must be >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            entry.fn(None, None, None, **{**entry.defaults, **bad})
