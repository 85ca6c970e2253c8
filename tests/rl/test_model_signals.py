"""Score-stage signals with a model forward pass: teacher, hint, cscr_shift."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.models import init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import signals
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.methods import model_signals as ms
from rlvr_jax.rl.methods import teacher_dists as td
from rlvr_jax.rollout import Groups, score
from rlvr_jax.tasks import arithmetic
from rlvr_jax.testing import parity_score_rows, score_context, tiny_config
from rlvr_jax.tokenizers import CharTokenizer, encode_prompt
from rlvr_jax.train import warmstart

HINT_TPL = "{prompt}\n{hint}"


def _context(tokenizer, task, seed=0, chunk=4):
    """A ScoreContext on a tiny random policy."""
    cfg = tiny_config(
        "qwen3",
        vocab_size=tokenizer.vocab_size,
        eos_token_id=tokenizer.eos_id,
        max_position_embeddings=512,
    )
    return score_context(init_model(cfg, seed=seed), tokenizer, task, chunk=chunk)


def _model(ctx):
    """The policy model of a ScoreContext."""
    return nnx.merge(ctx.policy.graphdef, ctx.policy.params, ctx.policy.rest)


class _EmptyHint(arithmetic.ArithmeticTask):
    def hint(self, problem):
        return ""


def _groups(tokenizer, task, rng, *, prompts=3, g=2, budget=12):
    """Rollouts by hand in the sampler layout: left-padded prompt, then a random response."""
    problems = task.problems(prompts, "train")
    encoded = [encode_prompt(tokenizer, p.prompt) for p in problems for _ in range(g)]
    rows, width = len(encoded), max(len(e) for e in encoded)
    shape = (rows, width + budget)
    tokens, attn = np.zeros(shape, np.int32), np.zeros(shape, bool)
    pmask, rmask = np.zeros(shape, bool), np.zeros(shape, bool)
    for i, e in enumerate(encoded):
        n = int(rng.integers(3, budget + 1))
        tokens[i, width - len(e) : width] = e
        tokens[i, width : width + n] = rng.integers(10, tokenizer.vocab_size, n)
        pmask[i, width - len(e) : width] = True
        rmask[i, width : width + n] = True
    attn = pmask | rmask
    zeros = np.zeros(shape, np.float32)
    return Groups(
        tokens=tokens,
        attention_mask=attn,
        prompt_mask=pmask,
        response_mask=rmask,
        behaviour_logps=zeros,
        entropy=zeros,
        group=np.repeat(np.arange(prompts), g).astype(np.int32),
        valid=np.array([True] * (rows - 1) + [False]),  # a padding row: masked out
        rewards=zeros[:, 0],
        correct=np.arange(rows) % 3 == 0,
        stopped=np.ones(rows, bool),
        reasons=[""] * rows,
        problems=problems,
    )


@pytest.fixture(scope="module")
def setup():
    """A tiny policy on arithmetic, one step's groups and its batch fields."""
    tokenizer = warmstart.default_tokenizer()
    task = tasks.get("arithmetic", **warmstart.TASK_OPTIONS["arithmetic"])
    ctx = _context(tokenizer, task)
    g = _groups(tokenizer, task, np.random.default_rng(0))
    # The sampler's log-probs equal teacher forcing; here they are teacher forcing.
    g.behaviour_logps = ctx.policy.logps(g.tokens, g.attention_mask)
    mask = g.response_mask & g.valid[:, None]
    b = {
        "tokens_BxT": g.tokens,
        "attention_mask_BxT": g.attention_mask,
        "mask_BxT": mask,
        "old_logps_BxT": np.where(mask, g.behaviour_logps, 0.0).astype(np.float32),
        "behaviour_logps_BxT": g.behaviour_logps,
        "correct_B": g.correct,
        "valid_B": g.valid,
    }
    return ctx, g, b


_DIRECT_WIDTH = 192


@functools.partial(jax.jit, static_argnums=0)
def _jit_token_logps(graphdef, state, tokens, attn):
    return token_logps(nnx.merge(graphdef, state), tokens, attn)


def _scored(model, tokens, attn) -> np.ndarray:
    """`scoring.token_logps` of the model on whole rows (jitted: eager op-by-op is slower)."""
    return np.asarray(_jit_token_logps(*nnx.split(model), tokens, attn))


def _direct(ctx, prompts: list[str], g, b, model=None) -> np.ndarray:
    """[R, L]: row i's response scored after the chat-wrapped prompts[i], built by hand.

    Each row is [prompt][response] from column 0 (right padding cannot change
    causal outputs), scored in one call, and its values put back at the masked
    columns of the original row.
    """
    rows, length = b["mask_BxT"].shape
    tokens = np.zeros((rows, _DIRECT_WIDTH), np.int32)
    attn = np.zeros((rows, _DIRECT_WIDTH), np.int32)
    spans = []
    for i in range(rows):
        p = encode_prompt(ctx.tokenizer, prompts[i])
        r = g.tokens[i][b["mask_BxT"][i]]
        assert len(p) + len(r) <= _DIRECT_WIDTH
        tokens[i, : len(p) + len(r)] = p + r.tolist()
        attn[i, : len(p) + len(r)] = 1
        spans.append((len(p), len(p) + len(r)))
    lp = _scored(model or _model(ctx), tokens, attn)
    out = np.zeros((rows, length), np.float32)
    for i, (lo, hi) in enumerate(spans):
        out[i, b["mask_BxT"][i]] = lp[i, lo:hi]
    return out


def _problem(g, i):
    return g.problems[int(g.group[i])]


def test_relayout_maps_every_response_column_back():
    prompts = [[7, 8, 9], [5]]
    tokens = np.array([[0, 1, 2, 30, 31, 0], [0, 0, 3, 40, 0, 0]], np.int32)
    attn = np.array([[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0]], bool)
    pmask = np.array([[0, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0]], bool)
    lay = ms.relayout(prompts, tokens, attn, pmask, pad_id=0, multiple=4)
    # width 3 + response columns 3..5 (3 each) = 6 -> 8 columns.
    np.testing.assert_array_equal(lay.tokens[0], [7, 8, 9, 30, 31, 0, 0, 0])
    np.testing.assert_array_equal(lay.tokens[1], [0, 0, 5, 40, 0, 0, 0, 0])
    np.testing.assert_array_equal(lay.attention_mask[1], [0, 0, 1, 1, 0, 0, 0, 0])
    back = ms.map_back(lay.tokens.astype(float), lay, 6)
    np.testing.assert_array_equal(back, np.where(np.arange(6) >= 3, tokens, 0))


def test_hint_equals_direct_scoring_of_the_hand_built_sequence(setup):
    ctx, g, b = setup
    out = ms.hint(ctx, g, b, template=HINT_TPL, correct_template="")
    assert set(out) == {"hint_logps_BxT"}
    rows = range(len(g.tokens))
    texts = [_problem(g, i).prompt + "\n" + ctx.task.hint(_problem(g, i)) for i in rows]
    np.testing.assert_allclose(out["hint_logps_BxT"], _direct(ctx, texts, g, b), atol=2e-5)
    # The hint changes the numbers (the context really is in the prompt).
    assert np.abs(out["hint_logps_BxT"] - b["old_logps_BxT"]).max() > 1e-3


def test_empty_hint_reproduces_the_old_logps(setup):
    ctx, g, b = setup
    empty = dataclasses.replace(ctx, task=_EmptyHint(**warmstart.TASK_OPTIONS["arithmetic"]))
    lp = ms.hint(empty, g, b, template="{prompt}{hint}", correct_template="")["hint_logps_BxT"]
    np.testing.assert_allclose(lp, b["old_logps_BxT"], atol=1e-5)


def test_hint_uses_the_correct_template_on_correct_rows(setup):
    ctx, g, b = setup
    tpl = "{prompt}\nA correct solution:\n{response}\nRephrase it."
    lp = ms.hint(ctx, g, b, template=HINT_TPL, correct_template=tpl)["hint_logps_BxT"]
    texts = []
    for i in range(len(g.tokens)):
        p = _problem(g, i)
        if b["correct_B"][i]:
            response = ctx.tokenizer.decode(g.tokens[i][g.response_mask[i]])
            texts.append(tpl.format(prompt=p.prompt, response=response))
        else:
            texts.append(p.prompt + "\n" + ctx.task.hint(p))
    assert b["correct_B"][b["valid_B"]].any() and not b["correct_B"].all()
    np.testing.assert_allclose(lp, _direct(ctx, texts, g, b), atol=2e-5)


def test_cscr_shifts_are_the_context_logps_minus_the_old_ones(setup):
    ctx, g, b = setup
    pos, neg = "{prompt}\nThis is right.", "{prompt}\nThis is wrong."
    out = ms.cscr_shift(ctx, g, b, correct_template=pos, incorrect_template=neg)
    assert set(out) == set(signals.provides("cscr_shift"))
    for field, suffix in (
        ("cf_shift_correct_BxT", "\nThis is right."),
        ("cf_shift_incorrect_BxT", "\nThis is wrong."),
    ):
        texts = [_problem(g, i).prompt + suffix for i in range(len(g.tokens))]
        want = _direct(ctx, texts, g, b) - b["old_logps_BxT"]
        np.testing.assert_allclose(out[field], want, atol=2e-5)
    assert not np.allclose(out["cf_shift_correct_BxT"], out["cf_shift_incorrect_BxT"])


def test_template_errors_name_the_option_and_the_task(setup):
    ctx, g, b = setup
    with pytest.raises(ValueError, match=r"score.hint.template.*'answer'.*valid fields"):
        ms.hint(ctx, g, b, template="{prompt} {answer}", correct_template="")
    no_hint = dataclasses.replace(ctx, task=tasks.get("countdown"))
    with pytest.raises(ValueError, match=r"task 'countdown' has no hint"):
        ms.hint(no_hint, g, b, template=HINT_TPL, correct_template="")


def test_teacher_equals_an_independent_scorer_call(setup):
    ctx, g, b = setup
    ctx = dataclasses.replace(ctx, cache={})
    out = ms.teacher(
        ctx,
        g,
        b,
        source="warm_start",
        domain="arithmetic",
        role="teacher",
        path="",
        template=HINT_TPL,
    )
    ws = warmstart.load_warm_start("arithmetic", "teacher")
    want = _scored(ws.model, b["tokens_BxT"], b["attention_mask_BxT"])
    np.testing.assert_allclose(
        out["teacher_logps_BxT"], np.where(b["mask_BxT"], want, 0), atol=1e-5, rtol=1e-5
    )

    def teachers():
        return [k for k in ctx.cache if isinstance(k, tuple) and k[0] == "teacher"]

    assert len(teachers()) == 1  # loaded once, reused on the next call
    again = ms.teacher(
        ctx,
        g,
        b,
        source="warm_start",
        domain="arithmetic",
        role="teacher",
        path="",
        template=HINT_TPL,
    )
    np.testing.assert_array_equal(again["teacher_logps_BxT"], out["teacher_logps_BxT"])
    assert len(teachers()) == 1


def test_teacher_source_hint_is_the_hint_view(setup):
    ctx, g, b = setup
    got = ms.teacher(
        ctx, g, b, source="hint", domain="", role="teacher", path="", template=HINT_TPL
    )
    want = ms.hint(ctx, g, b, template=HINT_TPL, correct_template="")
    np.testing.assert_array_equal(got["teacher_logps_BxT"], want["hint_logps_BxT"])


def test_teacher_with_another_tokenizer_is_refused():
    tok = CharTokenizer(vocab_size=128)
    ctx = _context(tok, tasks.get("arithmetic"))
    with pytest.raises(
        ValueError, match=r"config.score.teacher.*does not share the policy's tokenizer"
    ):
        ms.load_teacher(ctx, source="warm_start", domain="arithmetic", role="teacher", path="")
    with pytest.raises(ValueError, match=r"source = 'hub'; valid"):
        ms.load_teacher(ctx, source="hub", domain="", role="teacher", path="")


# -------------------------------------------------------------- teacher states
def test_teacher_hidden_and_topk_equal_a_direct_forward_of_the_hint_view(setup):
    ctx, g, b = setup
    ctx = dataclasses.replace(ctx, cache={})
    model = _model(ctx)
    kw = dict(source="hint", domain="", role="teacher", path="", template=HINT_TPL)
    h = td.teacher_hidden(ctx, g, b, **kw, diagnostics=False)["teacher_hidden_BxTxD"]
    top = td.teacher_topk(ctx, g, b, k=3, **kw, diagnostics=False)
    m = b["mask_BxT"]
    rows, length = m.shape
    texts = [p.prompt + "\n" + ctx.task.hint(p) for p in (_problem(g, i) for i in range(rows))]
    for i in range(rows):
        if not m[i].any():
            assert not h[i].any() and not top["teacher_topk_ids_BxTxK"][i].any()
            continue
        p = encode_prompt(ctx.tokenizer, texts[i])
        r = g.tokens[i][m[i]].tolist()
        ids = np.asarray([p + r], np.int32)
        out = model.forward(ids, np.ones_like(ids), return_hidden=True)
        lo = len(p)
        want_h = np.asarray(out.hidden[0, lo - 1 : lo - 1 + len(r)])  # state before each token
        np.testing.assert_allclose(h[i][m[i]], want_h, atol=2e-5)
        lp = jax.nn.log_softmax(np.asarray(out.logits[0, lo - 1 : lo - 1 + len(r)]), -1)
        want_v, want_i = jax.lax.top_k(lp, 3)
        np.testing.assert_allclose(top["teacher_topk_logps_BxTxK"][i][m[i]], want_v, atol=2e-5)
        np.testing.assert_array_equal(top["teacher_topk_ids_BxTxK"][i][m[i]], want_i)
        assert not h[i][~m[i]].any()


def test_teacher_hidden_and_topk_log_the_teachers_diagnostics(setup):
    # The same hinted view scored three ways: the sampled-token log-probs that come with
    # the hidden states / top-k give the "teacher" signal's diagnostics.
    ctx, g, b = setup
    ctx = dataclasses.replace(ctx, cache={}, step_cache={}, metrics={})
    kw = dict(source="hint", domain="", role="teacher", path="", template=HINT_TPL)
    ms.teacher(ctx, g, b, **kw, diagnostics=True)
    td.teacher_hidden(ctx, g, b, **kw, diagnostics=True)
    top = td.teacher_topk(ctx, g, b, k=3, **kw, diagnostics=True)
    want = {k.split("/", 1)[1]: v for k, v in ctx.metrics.items() if k.startswith("teacher/")}
    assert "sign_agree_balanced" in want
    for prefix in ("teacher_hidden", "teacher_topk"):
        for k, v in want.items():
            assert ctx.metrics[f"{prefix}/{k}"] == pytest.approx(v, rel=1e-3, abs=1e-4), (prefix, k)
    m = b["mask_BxT"]
    inside = (top["teacher_topk_ids_BxTxK"] == b["tokens_BxT"][..., None]).any(-1)
    assert ctx.metrics["teacher_topk/coverage"] == pytest.approx(inside[m].mean())


# ----------------------------------------------------------------------- diagnostics
def test_hint_diagnostics_are_the_noise_and_agreement_kernels(setup):
    from rlvr_jax.core import opsa
    from rlvr_jax.rl.methods import locators

    ctx, g, b = setup
    ctx.metrics.clear()
    lp = ms.hint(ctx, g, b, template=HINT_TPL, correct_template="", diagnostics=True)
    lp = lp["hint_logps_BxT"]
    got = dict(ctx.metrics)
    exact = dict(locator="exact", error_rate=0.0, noise_seed=0, judge_domain="", judge_role="judge")
    first = locators.first_mistake(ctx, g, b, **exact, judge_max_new_tokens=8)["first_mistake_B"]
    assert (first >= 0).any()  # random responses: the locator finds mistakes
    m, old, ok = b["mask_BxT"], b["old_logps_BxT"], b["correct_B"]
    want = dict(opsa.teacher_noise_stats(lp, old, ok, m))
    want.update(opsa.mistake_sign_agreement(lp, old, first, m))
    r = np.where(m, lp - old, 0.0)
    want["r_mean_correct"] = r[m & ok[:, None]].mean()
    want["r_mean_wrong"] = r[m & ~ok[:, None]].mean()
    assert set(got) == {f"hint/{k}" for k in want}
    for k, v in want.items():
        assert got[f"hint/{k}"] == pytest.approx(float(v), abs=1e-6), k
    assert got["hint/located_rows"] == float((first >= 0).sum())
    ctx.metrics.clear()
    ms.hint(ctx, g, b, template=HINT_TPL, correct_template="", diagnostics=False)
    assert ctx.metrics == {}


def test_diagnostics_without_a_locator_log_only_the_noise_stats(setup):
    ctx, g, b = setup
    countdown = tasks.get("countdown", **warmstart.TASK_OPTIONS["countdown"])
    cd_ctx = dataclasses.replace(ctx, task=countdown, metrics={})
    ms.teacher_diagnostics(cd_ctx, g, b, b["old_logps_BxT"] + 0.5, prefix="teacher")
    assert "teacher/sign_agree" not in cd_ctx.metrics
    assert cd_ctx.metrics["teacher/noise_frac_correct"] == 0.0  # r = +0.5 everywhere
    assert cd_ctx.metrics["teacher/noise_frac_wrong"] == 1.0
    assert cd_ctx.metrics["teacher/r_mean_wrong"] == pytest.approx(0.5)


# ------------------------------------------------------------------------ end to end
def _parity_rewards(monkeypatch):
    """A random model never solves a task: reward rows by the parity of their tokens."""
    monkeypatch.setattr(score, "score_rows", parity_score_rows)


def _capture(monkeypatch):
    """Records (context, groups, batch, batch with the signal fields) of every step."""
    seen = []
    original = signals.compute

    def compute(ctx, groups, batch, names, options):
        out = original(ctx, groups, batch, names, options)
        seen.append((ctx, groups, batch, out))
        return out

    monkeypatch.setattr(signals, "compute", compute)
    return seen


def _pulse(transform, signal):
    c = config_lib.default_config()
    config_lib.apply_variant(c, "pulse")
    c.eval.at_start = False
    c.checkpoint.export_final = False
    c.credit.transforms = transform
    c.score.signals = signal
    return c


@pytest.mark.slow
@pytest.mark.parametrize("transform, signal", [("opdvr", "teacher"), ("h2sd", "hint")])
def test_trainer_pulse_with_a_model_signal(transform, signal, tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    seen = _capture(monkeypatch)
    c = _pulse(transform, signal)
    c.score.teacher.domain = "arithmetic"
    trainer_lib.train(c, tmp_path)
    lines = [json.loads(x) for x in (Path(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    assert all(np.isfinite(x["loss"]) for x in train)
    # The signal's diagnostics reach metrics.jsonl every step (arithmetic has a locator).
    for x in train:
        assert 0.0 <= x[f"{signal}/noise_frac"] <= 1.0
        assert 0.0 <= x[f"{signal}/sign_agree_balanced"] <= 1.0
    ctx, g, b, out = seen[0]
    field = signals.provides(signal)[0]
    m = b["mask_BxT"]
    if signal == "teacher":
        ws = warmstart.load_warm_start("arithmetic", "teacher")
        want = _scored(ws.model, b["tokens_BxT"], b["attention_mask_BxT"])
        np.testing.assert_allclose(out[field], np.where(m, want, 0), atol=1e-5, rtol=1e-5)
    else:
        texts = [
            p.prompt + "\n" + ctx.task.hint(p) for p in (_problem(g, i) for i in range(len(m)))
        ]
        # Step 0 scores with the initial weights: a fresh init of the same seed.
        init = init_model(ctx.policy.config, seed=c.seed)
        np.testing.assert_allclose(out[field], _direct(ctx, texts, g, b, init), atol=2e-5)


def test_map_row_chunks_pads_the_last_chunk_with_row_0_and_cuts_it():
    a = np.arange(10, dtype=np.float32).reshape(5, 2)
    b = np.array([1, 2, 3, 4, 5], np.float32)
    shapes = []

    def fn(scale, a_Rx2, b_R):
        shapes.append((a_Rx2.shape, b_R.shape))
        return scale * a_Rx2.sum(1) + b_R

    got = signals.map_row_chunks(fn, (10.0,), (a, b), chunk=2)
    np.testing.assert_array_equal(got, 10.0 * a.sum(1) + b)
    assert shapes == [((2, 2), (2,))] * 3  # 2 + 2 + (1 row + 1 copy of row 0)


def test_pad_token_rows_grows_rows_and_columns_without_changing_the_old_scores():
    tokens = np.array([[5, 6, 7], [0, 8, 9]], np.int32)
    mask = np.array([[1, 1, 1], [0, 1, 1]], bool)
    t, m = signals.pad_token_rows(tokens, mask, 4, 5)
    np.testing.assert_array_equal(t[:2, :3], tokens)
    np.testing.assert_array_equal(m[:, 3:], False)  # new columns: masked out
    np.testing.assert_array_equal(t[2:], np.stack([t[0], t[0]]))  # new rows: row 0's copies
    t0, m0 = signals.pad_token_rows(np.zeros((0, 2), np.int32), np.zeros((0, 2), bool), 0, 3)
    assert t0.shape == (1, 3) and m0.tolist() == [[True, False, False]]  # one filler token
    # A causal scorer gives the old columns the same log-probs after padding.
    ctx = score_context(chunk=4)
    want = ctx.policy.logps(tokens, mask)
    np.testing.assert_allclose(ctx.policy.logps(t, m)[:2, :3], want, atol=1e-5)
