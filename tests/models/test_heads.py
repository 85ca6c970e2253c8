"""Value heads: NumPy references, the HL-Gauss support, bounds, and use on the tiny trunk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.models import init_model
from rlvr_jax.models.heads import CategoricalValueHead, ScalarValueHead
from rlvr_jax.testing import tiny_config


def _randomise(head, seed=0):
    # Fresh heads are near zero by design; random params make the reference checks bite.
    rng = np.random.default_rng(seed)
    state = nnx.state(head, nnx.Param)
    nnx.update(head, jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), state))


def test_scalar_head_matches_numpy():
    head = ScalarValueHead(8, rngs=nnx.Rngs(0))
    hidden = np.random.default_rng(0).normal(size=(3, 5, 8)).astype(np.float32)
    fresh = head(jnp.asarray(hidden))
    assert fresh.shape == (3, 5) and fresh.dtype == jnp.float32
    assert float(jnp.abs(fresh).max()) < 0.1  # small init: a fresh critic predicts ~0
    _randomise(head)
    want = hidden @ np.asarray(head.kernel[...])[:, 0] + np.asarray(head.bias[...])[0]
    np.testing.assert_allclose(np.asarray(head(jnp.asarray(hidden))), want, rtol=1e-5, atol=1e-5)
    # bfloat16 hidden states still give float32 values.
    assert head(jnp.asarray(hidden, jnp.bfloat16)).dtype == jnp.float32


def test_categorical_support_hand_computed():
    edges, centers = CategoricalValueHead.support(4, 0.0, 1.0)
    np.testing.assert_array_equal(edges, np.float32([0.0, 0.25, 0.5, 0.75, 1.0]))
    np.testing.assert_array_equal(centers, np.float32([0.125, 0.375, 0.625, 0.875]))
    assert edges.dtype == np.float32 and centers.dtype == np.float32
    head = CategoricalValueHead(8, num_bins=2, v_min=-1.0, v_max=3.0, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(head.edges, np.float32([-1.0, 1.0, 3.0]))
    np.testing.assert_array_equal(head.centers, np.float32([0.0, 2.0]))
    assert head.bin_width == 2.0
    # The support is a constant of the architecture, not a trainable parameter.
    assert len(jax.tree.leaves(nnx.state(head))) == 2


def test_categorical_head_matches_numpy():
    head = CategoricalValueHead(8, num_bins=5, v_min=-2.0, v_max=3.0, rngs=nnx.Rngs(0))
    _randomise(head)
    hidden = np.random.default_rng(1).normal(size=(2, 3, 8)).astype(np.float32)
    logits = head(jnp.asarray(hidden))
    assert logits.shape == (2, 3, 5) and logits.dtype == jnp.float32
    want_logits = hidden @ np.asarray(head.kernel[...]) + np.asarray(head.bias[...])
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-5, atol=1e-5)
    z = want_logits - want_logits.max(-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    want_values = probs @ np.float32([-1.5, -0.5, 0.5, 1.5, 2.5])
    values = head.values(logits)
    assert values.shape == (2, 3) and values.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(values), want_values, rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    # A few bin counts only: each new shape costs an XLA compile.
    num_bins=st.sampled_from([2, 3, 64]),
    v_min=st.floats(-100.0, 100.0),
    width=st.floats(1e-2, 100.0),
    scale=st.floats(0.0, 1e4),
    seed=st.integers(0, 2**31 - 1),
)
def test_categorical_values_within_range(num_bins, v_min, width, scale, seed):
    v_max = v_min + width
    # values() never reads the params: an abstract head skips their (compiled) init.
    head = nnx.eval_shape(
        lambda: CategoricalValueHead(
            4, num_bins=num_bins, v_min=v_min, v_max=v_max, rngs=nnx.Rngs(0)
        )
    )
    logits = np.random.default_rng(seed).normal(size=(3, num_bins)) * scale
    values = np.asarray(head.values(jnp.asarray(logits, jnp.float32)))
    assert np.all(np.isfinite(values))
    # f32 rounding of the expectation can only step a few ulps past the extreme centres.
    tol = 1e-5 * max(abs(v_min), abs(v_max))
    assert np.all(values >= head.centers[0] - tol) and np.all(values <= head.centers[-1] + tol)
    assert np.all(values >= v_min) and np.all(values <= v_max)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_bins=1, v_min=0.0, v_max=1.0), "num_bins"),
        (dict(num_bins=2.5, v_min=0.0, v_max=1.0), "num_bins"),
        (dict(num_bins=4, v_min=1.0, v_max=1.0), "v_min < v_max"),
        (dict(num_bins=4, v_min=2.0, v_max=-1.0), "v_min < v_max"),
        (dict(num_bins=4, v_min=0.0, v_max=float("inf")), "finite"),
    ],
)
def test_categorical_invalid_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CategoricalValueHead(8, rngs=nnx.Rngs(0), **kwargs)


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_heads_on_trunk_hidden_are_jittable(family):
    config = tiny_config(family)
    model = init_model(config)
    scalar = ScalarValueHead(config.hidden_size, rngs=nnx.Rngs(1))
    categorical = CategoricalValueHead(
        config.hidden_size, num_bins=11, v_min=-1.0, v_max=1.0, rngs=nnx.Rngs(2)
    )
    ids = jax.random.randint(jax.random.key(0), (2, 6), 3, config.vocab_size)
    mask = jnp.array([[1] * 6, [0, 0, 1, 1, 1, 1]], jnp.int32)

    @nnx.jit
    def critic(model, scalar, categorical, ids, mask):
        hidden = model.forward(ids, mask, return_hidden=True, logits="none").hidden
        return hidden, scalar(hidden), categorical.values(categorical(hidden))

    hidden, v_scalar, v_cat = critic(model, scalar, categorical, ids, mask)
    assert hidden.shape == (2, 6, config.hidden_size)
    assert v_scalar.shape == v_cat.shape == (2, 6)
    np.testing.assert_allclose(np.asarray(v_scalar), np.asarray(scalar(hidden)), atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(v_cat), np.asarray(categorical.values(categorical(hidden))), atol=1e-6
    )
    assert np.all(np.abs(np.asarray(v_cat)) <= 1.0)

    # Pure-JAX path: split the head, jit a function of its state.
    graphdef, state = nnx.split(scalar)
    pure = jax.jit(lambda state, h: nnx.merge(graphdef, state)(h))
    np.testing.assert_allclose(np.asarray(pure(state, hidden)), np.asarray(v_scalar), atol=1e-6)
