"""Partial rollouts (rl.async_partial): a row spanning a weight update holds tokens of two
versions, and μ of each token is the teacher-forced log-prob under the version that
sampled it; "abort" restarts unfinished rows under the new weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl.async_partial import segmented_sample, staleness_counts
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import tiny_config

CFG = tiny_config("qwen3")
PROMPTS = [[5, 17, 33], [9, 8, 7, 6], [42], [11, 12, 13]]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def versions():
    """Two policy versions whose log-probs differ clearly (B = A with a rescaled head)."""
    a = init_model(CFG, seed=0)
    a.lm_head[...] = a.lm_head[...] * 10.0
    state_a = nnx.state(a, nnx.Param)
    b = nnx.clone(a)
    b.lm_head[...] = b.lm_head[...] * 0.5 + 0.3
    return a, state_a, nnx.state(b, nnx.Param)


@pytest.fixture(scope="module")
def worker(versions):
    """The worker's own model copy and its sampler (one compile for every test)."""
    model = nnx.clone(versions[0])
    return model, Sampler(model)


_FORCED = {}


def _teacher_forced(model, params, ro):
    """log π(y_t) of every token of `ro` under `params` (one full, jitted forward pass)."""
    m = nnx.clone(model)
    nnx.update(m, params)
    graphdef, state = nnx.split(m)
    if graphdef not in _FORCED:
        _FORCED[graphdef] = jax.jit(lambda st, t, a: token_logps(nnx.merge(graphdef, st), t, a))
    fn = _FORCED[graphdef]
    return np.asarray(fn(state, jnp.asarray(ro.tokens), jnp.asarray(ro.attention_mask)))


class Switch:
    """newest(): version 0 for the first `calls` calls, then version 1."""

    def __init__(self, state_a, state_b, calls=1):
        self.states, self.calls, self.n = (state_a, state_b), calls, 0

    def __call__(self):
        v = 0 if self.n < self.calls else 1
        self.n += 1
        return v, self.states[v]


def test_continue_tags_each_token_with_the_version_that_sampled_it(versions, worker):
    model, state_a, state_b = versions
    worker, sampler = worker
    out = segmented_sample(
        sampler, worker, PROMPTS, PARAMS, jax.random.key(0),
        segment=3, mode="continue", newest=Switch(state_a, state_b),
    )  # fmt: skip
    ro = out.rollout
    assert out.segments == 3 and out.aborted_tokens == 0
    la, lb = _teacher_forced(model, state_a, ro), _teacher_forced(model, state_b, ro)
    for r in range(len(PROMPTS)):
        cols = np.flatnonzero(ro.response_mask[r])
        assert len(cols) == 8
        v = out.version_BxL[r, cols]
        assert v.tolist() == [0] * 3 + [1] * 5  # the update landed after segment 1
        np.testing.assert_allclose(ro.logps[r, cols[:3]], la[r, cols[:3]], atol=1e-5)
        np.testing.assert_allclose(ro.logps[r, cols[3:]], lb[r, cols[3:]], atol=1e-5)
        # The versions' log-probs differ, so the test would see a wrong tag.
        assert np.abs(la[r, cols] - lb[r, cols]).max() > 1e-2
    counts = staleness_counts(out.version_BxL, step=1, k=1)
    assert counts["tokens_staleness_0"].tolist() == [5] * 4  # version 1 at step 1
    assert counts["tokens_staleness_1"].tolist() == [3] * 4


def test_abort_restarts_unfinished_rows_under_the_new_weights(versions, worker):
    model, state_a, state_b = versions
    worker, sampler = worker
    out = segmented_sample(
        sampler, worker, PROMPTS, PARAMS, jax.random.key(0),
        segment=3, mode="abort", newest=Switch(state_a, state_b),
    )  # fmt: skip
    ro = out.rollout
    assert out.aborted_tokens == 3 * len(PROMPTS)
    lb = _teacher_forced(model, state_b, ro)
    for r in range(len(PROMPTS)):
        cols = np.flatnonzero(ro.response_mask[r])
        assert len(cols) == 8 and (out.version_BxL[r, cols] == 1).all()
        np.testing.assert_allclose(ro.logps[r, cols], lb[r, cols], atol=1e-5)


def test_no_update_means_one_version_and_no_abort(versions, worker):
    model, state_a, state_b = versions
    worker, sampler = worker
    out = segmented_sample(
        sampler, worker, PROMPTS, PARAMS, jax.random.key(0),
        segment=3, mode="abort", newest=Switch(state_a, state_b, calls=10),
    )  # fmt: skip
    assert out.aborted_tokens == 0
    assert (out.version_BxL[out.rollout.response_mask] == 0).all()


def test_bad_arguments(versions):
    model, state_a, _ = versions
    with pytest.raises(ValueError, match="mode = 'sometimes'"):
        segmented_sample(Sampler(model), model, PROMPTS, PARAMS, jax.random.key(0),
                         segment=3, mode="sometimes", newest=lambda: (0, state_a))  # fmt: skip
