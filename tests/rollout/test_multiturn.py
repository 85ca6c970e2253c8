"""The multi-turn episode loop: termination, masks, observations and rewards."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.models import init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rollout import cut_at_stop, observation_ids, run_episodes
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import MALFORMED, Problem
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train.warmstart import default_tokenizer

_logps = nnx.jit(token_logps)


@dataclasses.dataclass(frozen=True)
class _Step:
    observation: str | None
    done: bool
    reward: float | None
    info: dict


class _CountingEnv:
    """Ends after `problem.metadata["turns"]` turns; reward = characters written / 100."""

    def __init__(self, problem: Problem):
        self.limit, self.texts = problem.metadata["turns"], []

    def step(self, text: str) -> _Step:
        self.texts.append(text)
        if len(self.texts) == self.limit:
            return _Step(None, True, _reward(self.texts), {"reason": "correct"})
        return _Step(f"obs {len(self.texts)}", False, None, {"reason": "ok"})


def _reward(texts):
    return sum(len(t) for t in texts) / 100


def _runs(mask_L: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of True."""
    padded = np.concatenate([[False], mask_L, [False]]).astype(int)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2], edges[1::2], strict=True))


@pytest.fixture(scope="module")
def toy():
    tok = toy_tokenizer(128)
    model = init_model(tiny_config(), seed=3)
    problems = [Problem(f"p/{i}", f"q{i}", "", "", {"turns": i % 3 + 1}) for i in range(4)]
    return tok, model, problems


def test_episodes_end_when_the_env_says_and_layout_is_exact(toy):
    tok, model, problems = toy
    params = SamplingParams(max_new_tokens=5, n=2)
    ep = run_episodes(
        Sampler(model), tok, problems, _CountingEnv, params, jax.random.key(0), max_turns=5
    )
    r = ep.rollout
    assert r.tokens.shape[0] == 8 and ep.done.all()
    np.testing.assert_array_equal(ep.problem_index, np.repeat(np.arange(4), 2))
    np.testing.assert_array_equal(ep.num_turns, [1, 1, 2, 2, 3, 3, 1, 1])
    assert not (r.response_mask & r.prompt_mask).any()
    assert not (r.response_mask & ~r.attention_mask).any()
    stop = tok.stop_ids
    for b in range(8):
        keep = r.attention_mask[b]
        prompt = tok.encode_chat([{"role": "user", "content": problems[b // 2].prompt}])
        assert r.tokens[b][r.prompt_mask[b]].tolist() == prompt
        # Sampled runs are the turns, forced runs the rendered observations, alternating.
        sampled = [r.tokens[b][s:e].tolist() for s, e in _runs(r.response_mask[b] & keep)]
        forced = [r.tokens[b][s:e].tolist() for s, e in _runs(r.forced_mask[b])]
        want_obs = [observation_ids(tok, f"obs {t + 1}") for t in range(ep.num_turns[b] - 1)]
        assert forced == want_obs
        assert ep.observations[b] == [f"obs {t + 1}" for t in range(ep.num_turns[b] - 1)]
        texts = [tok.decode(cut_at_stop(ids, stop)) for ids in sampled]
        assert texts == ep.turns[b]
        assert ep.rewards[b] == pytest.approx(_reward(texts))
        # Every non-final turn ended with a stop token or used the whole budget.
        for ids in sampled[:-1]:
            assert ids[-1] in stop or len(ids) == params.max_new_tokens


def test_logps_are_the_trainers_teacher_forced_logps(toy):
    tok, model, problems = toy
    params = SamplingParams(max_new_tokens=4, n=1)
    ep = run_episodes(
        Sampler(model), tok, problems, _CountingEnv, params, jax.random.key(1), max_turns=4
    )
    r = ep.rollout
    want = np.asarray(_logps(model, r.tokens, r.attention_mask))
    np.testing.assert_allclose(r.logps[r.response_mask], want[r.response_mask], atol=2e-4)
    assert (r.logps[~r.response_mask] == 0).all()


def test_rows_cut_at_max_turns_get_reward_zero(toy):
    tok, model, problems = toy
    params = SamplingParams(max_new_tokens=3, n=1)
    ep = run_episodes(
        Sampler(model), tok, problems, _CountingEnv, params, jax.random.key(2), max_turns=2
    )
    np.testing.assert_array_equal(ep.num_turns, [1, 2, 2, 1])
    np.testing.assert_array_equal(ep.done, [True, True, False, True])
    assert ep.rewards[2] == 0 and ep.results[2].info["reason"] == MALFORMED
    assert ep.rewards[1] == pytest.approx(_reward(ep.turns[1]))
    again = run_episodes(
        Sampler(model), tok, problems, _CountingEnv, params, jax.random.key(2), max_turns=2
    )
    assert again.turns == ep.turns  # deterministic for a key


def test_tool_env_episodes_replay_to_the_same_results():
    tok = default_tokenizer()
    model = init_model(tiny_config(vocab_size=tok.vocab_size, eos_token_id=tok.eos_id), seed=0)
    task = tasks.get("tool_lookup", num_lookups=1, max_turns=2)
    problems = task.problems(3, "test")
    params = SamplingParams(max_new_tokens=12, n=2, temperature=1.0)
    ep = run_episodes(
        Sampler(model, pad_id=tok.pad_id),
        tok,
        problems,
        task.env,
        params,
        jax.random.key(0),
        max_turns=task.max_turns + 1,
    )
    assert ep.done.all() and (ep.num_turns <= task.max_turns + 1).all()
    for b, result in enumerate(ep.results):
        problem = problems[ep.problem_index[b]]
        env = task.env(problem)
        steps = [env.step(t) for t in ep.turns[b]]
        assert [s.observation for s in steps[:-1]] == ep.observations[b]
        assert steps[-1].done and steps[-1].reward == ep.rewards[b] == result.reward
        assert steps[-1].info["reason"] == result.info["reason"]
        if result.info["tool"] == "answer":  # ended by an answer: the task's verifier agrees
            assert task.verify(problem, ep.turns[b][-1]).reward == ep.rewards[b]


def test_tool_env_reference_turns_earn_reward_one():
    """The env side of the loop with a scripted policy: the reference turns score 1."""
    task = tasks.get("tool_lookup", num_lookups=2)
    from rlvr_jax.tasks.tools import reference_turns

    for problem in task.problems(5, "test"):
        env = task.env(problem)
        results = [env.step(t) for t in reference_turns(problem)]
        assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
        assert results[-1].reward == 1.0


def test_bad_max_turns(toy):
    tok, model, problems = toy
    with pytest.raises(ValueError, match="max_turns"):
        run_episodes(
            Sampler(model), tok, problems, _CountingEnv, SamplingParams(), jax.random.key(0),
            max_turns=0,
        )  # fmt: skip
