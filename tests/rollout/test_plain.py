"""The rollout stage's default plug-in and the shared score step (cut → decode → verify)."""

import jax
import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.models import init_model
from rlvr_jax.rollout import ROLLOUTS, Prefix, Request, RolloutContext, score, score_rows
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.testing import parity_score_rows, tiny_config, toy_tokenizer
from rlvr_jax.tokenizers import encode_prompt

TOK = toy_tokenizer()
TASK = tasks.get("arithmetic")


@pytest.fixture(scope="module")
def sampler():
    model = init_model(tiny_config(vocab_size=TOK.vocab_size), seed=0)
    return Sampler(model, pad_id=0)


def _ctx(sampler, request, key=0, **kw):
    params = SamplingParams(max_new_tokens=8, stop_token_ids=TOK.stop_ids)
    return RolloutContext(sampler, TOK, TASK, None, params, jax.random.PRNGKey(key), request, **kw)


def test_plain_rows_are_the_samplers_groups_with_their_counts(sampler, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    problems = TASK.problems(2, "train")
    out = ROLLOUTS.get("plain").fn(_ctx(sampler, Request(problems, np.array([3, 3]))))
    # n = 3 per prompt in one call: the same rows (draws depend on the row position only).
    prompts = [encode_prompt(TOK, p.prompt) for p in problems]
    params = SamplingParams(max_new_tokens=8, stop_token_ids=TOK.stop_ids, n=3)
    want = sampler.sample(prompts, params, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(out.tokens, want.tokens)
    np.testing.assert_array_equal(out.behaviour_logps, want.logps)  # μ: what was sampled
    np.testing.assert_array_equal(out.group, [0, 0, 0, 1, 1, 1])
    sampled = [want.tokens[r][want.response_mask[r]] for r in range(6)]
    np.testing.assert_array_equal(out.rewards, [s.sum() % 2 for s in sampled])
    assert out.valid.all() and out.num_groups == 2


def test_prefixes_become_response_tokens_with_their_logps(sampler, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    problems = TASK.problems(1, "train")
    f32 = np.float32
    prefix = Prefix([30, 31, 32], np.array([-1, -2, -3], f32), np.array([0.5, 0.6, 0.7], f32))
    request = Request(problems, np.array([2]), prefixes=[prefix, None], max_new_tokens=4)
    out = ROLLOUTS.get("plain").fn(_ctx(sampler, request))
    r0 = out.tokens[0][out.response_mask[0]]
    np.testing.assert_array_equal(r0[:3], [30, 31, 32])  # the prefix, now response
    np.testing.assert_array_equal(out.behaviour_logps[0][out.response_mask[0]][:3], [-1, -2, -3])
    np.testing.assert_array_equal(out.entropy[0][out.response_mask[0]][:3], prefix.entropy)
    assert 3 < out.lengths[0] <= 3 + 4 and out.lengths[1] <= 4  # the round's budget
    assert not (out.attention_mask & ~out.prompt_mask & ~out.response_mask).any()
    assert out.rewards[0] == r0.sum() % 2  # the verdict covers the whole response


def test_overlong_shaping_penalises_long_responses(sampler, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    problems = TASK.problems(1, "train")
    request = Request(problems, np.array([4]))
    plain = ROLLOUTS.get("plain").fn(_ctx(sampler, request))
    shaped = ROLLOUTS.get("plain").fn(_ctx(sampler, request, overlong_cache=4))
    # L_max = 8, L_cache = 4: (4 − |y|) / 4 past 4 tokens.
    want = plain.rewards + np.where(plain.lengths > 4, (4 - plain.lengths) / 4, 0.0)
    np.testing.assert_allclose(shaped.rewards, want, rtol=1e-6)


def test_score_rows_cuts_at_the_first_stop_token_and_decodes():
    p = TASK.problems(1, "train")[0]
    good = TOK.encode(p.solution) + [TOK.stop_ids[0]] + TOK.encode("junk")
    bad = TOK.encode("Answer: -1")
    v = score_rows(TASK, TOK, [p, p], [good, bad], TOK.stop_ids)
    assert v.texts[0] == p.solution and v.reasons[0] == CORRECT and v.correct.tolist() == [1, 0]
    assert v.rewards.dtype == np.float64 and v.rewards[0] == TASK.verify(p, p.solution).reward
