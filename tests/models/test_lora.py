"""LoRA adapters: zero-init identity, NumPy reference, merge/remove, adapter-only training."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.models.layers import Linear
from rlvr_jax.models.lora import (
    ALL_TARGETS,
    add_lora,
    has_lora,
    lora_state,
    merge_lora,
    remove_lora,
    split_lora,
)
from rlvr_jax.testing import tiny_config

FAMILIES = ("qwen3", "qwen2", "llama")


@nnx.jit
def _logits(model, ids, mask):
    # One compile per model structure instead of one per eager op: keeps the tests fast.
    return model(ids, attention_mask=mask)


def _batch(config, seed=0):
    ids = jax.random.randint(jax.random.key(seed), (2, 7), 3, config.vocab_size)
    # Left padding on row 1 so padded positions go through the adapters too.
    mask = jnp.array([[1] * 7, [0, 0, 1, 1, 1, 1, 1]], jnp.int32)
    return ids, mask


def _randomise_b(model, seed=1, scale=0.05):
    # NumPy draws: eager jax.random would compile once per adapter shape.
    rng = np.random.default_rng(seed)
    for _, module in nnx.iter_modules(model):
        if isinstance(module, Linear) and module.lora is not None:
            b = module.lora.b
            b[...] = jnp.asarray(rng.normal(size=b.shape) * scale, b.dtype)


@pytest.mark.parametrize("family", FAMILIES)
def test_add_merge_remove(family):
    # One model per family through the whole lifecycle: every stage reuses two compiles.
    config = tiny_config(family)
    model = init_model(config, seed=0)
    ids, mask = _batch(config)
    base = np.asarray(_logits(model, ids, mask))
    graphdef_base = nnx.graphdef(model)
    n_adapters = len(ALL_TARGETS) * config.num_layers

    # B = 0 at init: exactly the same logits.
    assert add_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(0)) == n_adapters
    assert has_lora(model)
    np.testing.assert_array_equal(np.asarray(_logits(model, ids, mask)), base)

    _randomise_b(model)
    adapted = np.asarray(_logits(model, ids, mask))
    assert np.abs(adapted - base).max() > 1e-3

    merged_model = nnx.clone(model)
    assert merge_lora(merged_model) == n_adapters
    assert not has_lora(merged_model)
    assert nnx.graphdef(merged_model) == graphdef_base
    merged = np.asarray(_logits(merged_model, ids, mask))
    np.testing.assert_allclose(merged, adapted, atol=1e-5, rtol=0)

    assert remove_lora(model) == n_adapters
    assert not has_lora(model)
    assert nnx.graphdef(model) == graphdef_base
    np.testing.assert_array_equal(np.asarray(_logits(model, ids, mask)), base)


def test_targets_and_layers_subset():
    config = tiny_config("qwen3", num_layers=3)
    model = init_model(config)
    n = add_lora(model, targets=("q_proj", "down_proj"), layers=[1], rank=2, alpha=2.0,
                 rngs=nnx.Rngs(0))  # fmt: skip
    assert n == 2
    adapted = {p for p, m in nnx.iter_modules(model) if isinstance(m, Linear) and m.lora}
    assert adapted == {("layers", 1, "self_attn", "q_proj"), ("layers", 1, "mlp", "down_proj")}
    assert jax.tree.map(jnp.shape, lora_state(model)["layers"][1]["mlp"]["down_proj"]["lora"]) == {
        "a": (config.intermediate_size, 2),
        "b": (2, config.hidden_size),
    }


def test_linear_matches_numpy_reference():
    rng = np.random.default_rng(0)
    rank, alpha = 3, 12.0
    model = init_model(tiny_config("qwen2"))
    add_lora(model, targets=("k_proj",), rank=rank, alpha=alpha, rngs=nnx.Rngs(1))
    linear = model.layers[1].self_attn.k_proj  # has a bias in qwen2
    d_out = linear.kernel.shape[1]
    b = rng.normal(size=(rank, d_out)).astype(np.float32)
    linear.lora.b[...] = jnp.asarray(b)
    x = rng.normal(size=(2, 4, linear.kernel.shape[0])).astype(np.float32)
    w, a = np.asarray(linear.kernel[...]), np.asarray(linear.lora.a[...])
    bias = np.asarray(linear.bias[...])
    want = x @ (w + a @ b * alpha / rank) + bias
    np.testing.assert_allclose(np.asarray(linear(jnp.asarray(x))), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(linear.lora.delta_kernel()), a @ b * alpha / rank, rtol=1e-5, atol=1e-6
    )


def _loss(model, ids, mask):
    logits = model(ids, attention_mask=mask)
    logp = jax.nn.log_softmax(logits[:, :-1])
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()


def test_grad_only_lora_and_optax_step_leaves_base():
    config = tiny_config("qwen3")
    model = init_model(config)
    ids, mask = _batch(config)
    add_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(0))
    graphdef, lora, rest = split_lora(model)
    # Eager split states alias the model's variables: snapshot before updating.
    lora_before, rest_before = jax.tree.map(np.array, (lora, rest))
    tx = optax.sgd(0.1)

    @jax.jit
    def step(lora, rest):
        loss, grads = jax.value_and_grad(
            lambda lo: _loss(nnx.merge(graphdef, lo, rest), ids, mask)
        )(lora)
        updates, _ = tx.update(grads, tx.init(lora), lora)
        return loss, grads, optax.apply_updates(lora, updates)

    loss0, grads, new_lora = step(lora, rest)
    assert {p for p, _ in nnx.to_flat_state(grads)} == {p for p, _ in nnx.to_flat_state(lora)}
    # With B = 0, dL/dA = 0 exactly, but dL/dB != 0 (A is random).
    flat = [(p[-1], float(jnp.abs(v[...]).max())) for p, v in nnx.to_flat_state(grads)]
    assert max(g for name, g in flat if name == "b") > 0
    assert all(g == 0 for name, g in flat if name == "a")

    nnx.update(model, new_lora)
    _, lora_after, rest_after = split_lora(model)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.array, rest_after), rest_before)
    moved = jax.tree.map(lambda x, y: float(np.abs(x - y).max()), lora_after, lora_before)
    assert max(jax.tree.leaves(moved)) > 0
    loss1, _, _ = step(lora_after, rest_after)
    assert loss1 < loss0


def test_errors():
    model = init_model(tiny_config("llama"))
    with pytest.raises(ValueError, match="valid: .*q_proj"):
        add_lora(model, targets=("q_proj", "qkv"), rank=2, alpha=2.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="out of range"):
        add_lora(model, layers=[5], rank=2, alpha=2.0, rngs=nnx.Rngs(0))
    assert not has_lora(model)  # failed calls attach nothing
    add_lora(model, targets=("v_proj",), rank=2, alpha=2.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="already has a LoRA adapter"):
        add_lora(model, targets=("o_proj", "v_proj"), rank=2, alpha=2.0, rngs=nnx.Rngs(0))
    # The failed call did not attach the o_proj adapters either.
    assert remove_lora(model) == model.config.num_layers
    with pytest.raises(ValueError, match="rank"):
        add_lora(model, rank=0, alpha=2.0, rngs=nnx.Rngs(0))
