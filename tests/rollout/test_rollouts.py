"""The rollout plug-ins of issue 14: each test fails if its stage is bypassed (a plain rollout)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.core import off_context
from rlvr_jax.models import lora
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.models.transformer import HiddenPerturbation
from rlvr_jax.rollout import ROLLOUTS, score
from rlvr_jax.rollout.guided import solution_prefix
from rlvr_jax.rollout.score import Verdicts
from rlvr_jax.testing import parity_score_rows
from rlvr_jax.tokenizers import encode_prompt
from tests.rollout.common import TOK, rollout_ctx

_logps = nnx.jit(token_logps)


_ctx = rollout_ctx


def _teacher_forced(model, groups):
    return np.asarray(_logps(model, groups.tokens, groups.attention_mask))


# -------------------------------------------------------------------------- guided
def test_guided_rows_keep_mu_and_are_laid_out_on_the_unguided_prompt(policy, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    model, sampler = policy
    task = tasks.get("arithmetic")
    ctx = _ctx(policy, task, [4, 4])
    hp = dict(ROLLOUTS.get("guided").defaults)
    out = ROLLOUTS.get("guided").fn(ctx, **hp)
    guided = out.info["guided_B"]
    np.testing.assert_array_equal(guided, [1, 1, 0, 0, 1, 1, 0, 0])
    # Every row's context is the unguided prompt: that is what pi_old and the loss score.
    for r in range(8):
        problem = ctx.request.problems[out.group[r]]
        np.testing.assert_array_equal(
            out.tokens[r][out.prompt_mask[r]], encode_prompt(TOK, problem.prompt)
        )
    # The guided rows were sampled on the guided prompt: same tokens and mu as sampling there.
    problems = ctx.request.problems
    begins = "\nThe solution begins:\n"
    texts = [p.prompt + begins + solution_prefix(p.solution, 0.5) for p in problems]
    rows = [
        encode_prompt(TOK, texts[g] if guided[r] else problems[g].prompt)
        for r, g in enumerate(out.group)
    ]
    want = sampler.sample(rows, ctx.params(), ctx.key)
    for r in range(8):
        np.testing.assert_array_equal(
            out.tokens[r][out.response_mask[r]], want.tokens[r][want.response_mask[r]]
        )
        np.testing.assert_array_equal(
            out.behaviour_logps[r][out.response_mask[r]], want.logps[r][want.response_mask[r]]
        )
    # mu != pi_old on guided rows (pi_old: teacher forcing on the unguided prompt), = elsewhere.
    old = _teacher_forced(model, out)
    m = out.response_mask
    diff = np.abs(np.where(m, old - out.behaviour_logps, 0)).max(-1)
    assert (diff[guided] > 1e-3).all() and (diff[~guided] < 2e-4).all()
    w, _ = off_context.off_context_weights(old, out.behaviour_logps, m, cap=2.0)
    w = np.asarray(w)
    assert np.abs(w[guided][m[guided]] - 1).max() > 1e-3
    np.testing.assert_allclose(w[~guided][m[~guided]], 1.0, atol=1e-3)


def test_solution_prefix_is_the_first_lines():
    assert solution_prefix("a\nb\nc", 0.5) == "a\nb" and solution_prefix("a\nb", 0.5) == "a"
    assert solution_prefix("a\nb", 0.0) == "" and solution_prefix("a\nb", 1.0) == "a\nb"


def test_answer_free_prefixes_never_show_the_last_line():
    assert solution_prefix("a\nb\nc", 1.0, answer_free=True) == "a\nb"
    assert solution_prefix("a\nb\nc", 0.5, answer_free=True) == "a\nb"
    assert solution_prefix("a\nb\nc", 0.3, answer_free=True) == "a"
    assert solution_prefix("a", 1.0, answer_free=True) == ""


def test_only_cliff_groups_are_guided_in_place_of_their_first_plain_rows(policy, monkeypatch):
    """Group 0 fails every plain row (a cliff), group 1 solves one: only group 0's first
    ⌈½·4⌉ rows are re-sampled guided; the plain rows they replace count off the batch."""
    calls = []

    def scorer(task, tokenizer, problems_R, sampled_R, stop_ids):
        calls.append([p.prompt for p in problems_R])
        first = len(calls) == 1
        ok = np.array([not first or (p is cliffless and i == 4) for i, p in
                       enumerate(problems_R)], bool)  # fmt: skip
        return Verdicts(ok.astype(np.float64), ok, ["x"] * len(ok), [""] * len(ok))

    monkeypatch.setattr(score, "score_rows", scorer)
    model, sampler = policy
    ctx = _ctx(policy, tasks.get("arithmetic"), [4, 4])
    problems = ctx.request.problems
    cliffless = problems[1]
    hp = dict(ROLLOUTS.get("guided").defaults, only_cliffs=True)
    out = ROLLOUTS.get("guided").fn(ctx, **hp)
    np.testing.assert_array_equal(out.info["guided_B"], [1, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(out.info["cliff_B"], [1, 1, 1, 1, 0, 0, 0, 0])
    assert calls[1] == [problems[0].prompt] * 2  # the re-sampled rows only
    np.testing.assert_array_equal(out.correct, [1, 1, 0, 0, 1, 0, 0, 0])
    plain = ROLLOUTS.get("plain").fn(ctx)
    for r in range(2, 8):  # the rows kept are the plain rollout's
        np.testing.assert_array_equal(
            out.tokens[r][out.response_mask[r]], plain.tokens[r][plain.response_mask[r]]
        )
    assert out.off_batch == (2, int(plain.lengths[:2].sum()))
    # The guided rows were sampled on the guided prompt (own key) and sit on the plain one.
    text = (
        problems[0].prompt + "\nThe solution begins:\n" + solution_prefix(problems[0].solution, 0.5)
    )
    want = sampler.sample(
        [encode_prompt(TOK, text)] * 2, ctx.params(), jax.random.fold_in(ctx.key, 1)
    )
    for r in range(2):
        np.testing.assert_array_equal(
            out.tokens[r][out.response_mask[r]], want.tokens[r][want.response_mask[r]]
        )
        np.testing.assert_array_equal(
            out.tokens[r][out.prompt_mask[r]], encode_prompt(TOK, problems[0].prompt)
        )


# ---------------------------------------------------------------------- latent noise
def test_latent_noise_perturbs_exactly_half_of_each_group_at_the_configured_rms(policy):
    model, sampler = policy
    task = tasks.get("arithmetic")
    ctx = _ctx(policy, task, [4, 2])
    sigma, layer = 0.7, -1
    out = ROLLOUTS.get("latent_noise").fn(
        ctx, sigma=sigma, layer=layer, fraction=0.5, old_logps="clean"
    )
    noisy = out.info["noise_B"]
    np.testing.assert_array_equal(noisy, [1, 1, 0, 0, 1, 0])
    plain = ROLLOUTS.get("plain").fn(ctx)
    same = (out.tokens == plain.tokens).all(-1) & (
        out.behaviour_logps == plain.behaviour_logps
    ).all(-1)
    np.testing.assert_array_equal(same, ~noisy)  # clean rows are the plain rollout's
    # The first sampled token's log-prob is the prefill's under noise sigma·RMS at `layer`,
    # drawn as the sampler draws it (the first half of the split key, one row per slot).
    p = int(np.flatnonzero(out.prompt_mask.any(0))[-1]) + 1  # the context bucket
    rows = -(-len(noisy) // sampler.batch_multiple) * sampler.batch_multiple
    noise_key, _ = jax.random.split(ctx.key)
    noise = jax.random.normal(noise_key, (rows, p, model.config.hidden_size), jnp.float32)
    ctx_mask = out.attention_mask[:, :p]
    scale = np.zeros(rows, np.float32)
    scale[: len(noisy)] = sigma * noisy
    noise = noise[: len(noisy)] * scale[: len(noisy), None, None] * ctx_mask[..., None]
    pert = HiddenPerturbation(noise, layer=layer, relative_to_rms=True)
    logits = model.forward(out.tokens[:, :p], ctx_mask, logits="last", perturbation=pert).logits
    first = jax.nn.log_softmax(logits[:, -1])[np.arange(len(noisy)), out.tokens[:, p]]
    np.testing.assert_allclose(out.behaviour_logps[:, p], first, atol=2e-4)
    clean = model.forward(out.tokens[:, :p], ctx_mask, logits="last").logits
    shift = np.abs(np.asarray(jax.nn.log_softmax(clean[:, -1]) - jax.nn.log_softmax(logits[:, -1])))
    assert (shift.max(-1)[noisy] > 1e-3).all() and (shift.max(-1)[~noisy] < 1e-5).all()


# ----------------------------------------------------------------------- multi-turn
def test_multi_turn_rows_are_episodes_with_environment_tokens_outside_the_response(policy):
    model, _ = policy
    task = tasks.get("tool_lookup", num_lookups=1, max_name_syllables=1, instructions=False)
    ctx = _ctx(policy, task, [2, 2], max_new_tokens=12)
    out = ROLLOUTS.get("multi_turn").fn(ctx, max_turns=0)
    turns = out.info["turns_B"]
    assert (turns >= 1).all() and (turns <= task.episode_turns()).all() and (turns > 1).any()
    forced = out.attention_mask & ~out.prompt_mask & ~out.response_mask
    assert (forced.sum(-1)[turns > 1] > 0).all() and not forced[turns == 1].any()
    # Log-probs of every turn's sampled tokens = teacher forcing of the whole episode.
    want = _teacher_forced(model, out)
    m = out.response_mask
    np.testing.assert_allclose(out.behaviour_logps[m], want[m], atol=2e-4)
    assert (out.behaviour_logps[~m] == 0).all()
    # Rewards come from the environment: a random policy never answers correctly.
    assert set(out.reasons) <= {"wrong_answer", "malformed"} and (out.rewards == 0).all()
    with pytest.raises(ValueError, match="multi_turn.*single-turn"):
        ROLLOUTS.get("multi_turn").fn(_ctx(policy, tasks.get("arithmetic"), [1]), max_turns=0)


# -------------------------------------------------------------------------- LSPO
def _cliff_then_parity(calls):
    """Verifier: the first call (the plain rollout) fails every row of problem 0 and scores
    the rest by parity; later calls (the adapter's re-rolls) score by parity."""

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        v = parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        if not calls:
            p0 = np.array([p.id == problems_R[0].id for p in problems_R])
            v = Verdicts(np.where(p0, 0.0, v.rewards), v.correct & ~p0, v.reasons, v.texts)
        calls.append(len(problems_R))
        return v

    return score_rows


def test_lora_scaffold_rerolls_only_the_all_fail_groups_and_never_touches_the_base(
    policy, monkeypatch
):
    model, sampler = policy
    task = tasks.get("arithmetic")
    before = jax.tree.map(np.array, nnx.state(model, nnx.Param))
    calls, cache = [], {}
    monkeypatch.setattr(score, "score_rows", _cliff_then_parity(calls))
    ctx = _ctx(policy, task, [4, 4], cache=cache)
    hp = dict(ROLLOUTS.get("lora_scaffold").defaults, rank=4, steps=3, lr=3e-2, rerolls=8)
    out = ROLLOUTS.get("lora_scaffold").fn(ctx, **hp)
    assert calls == [8, 8]  # the plain rows, then 8 re-rolls of the one cliff problem
    np.testing.assert_array_equal(out.info["cliff_B"], [1, 1, 1, 1, 0, 0, 0, 0])
    spliced = out.info["scaffold_B"]
    assert spliced[:2].any() and not spliced[2:].any()  # at most half of group 0
    assert out.correct[spliced].all()
    # Group 1 (not a cliff) is exactly the plain rollout's.
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    plain = ROLLOUTS.get("plain").fn(ctx)
    w = out.tokens.shape[1] - plain.tokens.shape[1]
    np.testing.assert_array_equal(out.tokens[4:, w:], plain.tokens[4:])
    np.testing.assert_array_equal(out.behaviour_logps[4:, w:], plain.behaviour_logps[4:])
    # mu of the spliced rows is the adapter's, not the base's.
    m = out.response_mask
    base = _teacher_forced(model, out)
    diff = np.abs(np.where(m, base - out.behaviour_logps, 0)).max(-1)
    assert (diff[spliced] > 1e-3).all() and (diff[~spliced] < 2e-4).all()
    (scaffold,) = cache.values()
    assert lora.has_lora(scaffold.model) and not lora.has_lora(model)
    adapted = _teacher_forced(scaffold.model, out)
    np.testing.assert_allclose(out.behaviour_logps[m & spliced[:, None]],
                               adapted[m & spliced[:, None]], atol=2e-4)  # fmt: skip
    after = jax.tree.map(np.array, nnx.state(model, nnx.Param))
    jax.tree.map(np.testing.assert_array_equal, before, after)  # the base never moved
    assert sampler.model is model


def test_rollout_plug_ins_refuse_prefixes(policy):
    task = tasks.get("arithmetic")
    ctx = _ctx(policy, task, [1])
    prefix = dataclasses.replace(ctx.request, prefixes=[None])
    ctx = dataclasses.replace(ctx, request=prefix)
    for name in ("guided", "latent_noise", "lora_scaffold"):
        with pytest.raises(ValueError, match=f"'{name}' cannot continue prefixes"):
            ROLLOUTS.get(name).fn(ctx, **ROLLOUTS.get(name).defaults)
