"""Execution options (attention kernel, scanned layers, remat) compute the same model.

Oracle: the default execution (dense attention, unrolled layers, no remat), itself
checked against transformers in test_transformer.py. Every option must give the
same logits at real positions and the same parameter gradients of a scoring loss.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import KVCache, scoring
from rlvr_jax.models.lora import add_lora
from rlvr_jax.models.transformer import init_model, with_execution
from rlvr_jax.testing import tiny_config

B, T = 3, 21
TOL = 1e-5

OPTIONS = {
    "blockwise": dict(attention="blockwise", attention_block=8),
    "scan_remat_blockwise": dict(scan_layers=True, remat="block", attention="blockwise",
                                 attention_block=8),
    "remat_dots": dict(remat="dots"),
}  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return init_model(tiny_config("qwen3", num_layers=3), seed=0)


@pytest.fixture(scope="module")
def reference(model):
    """The default execution's logits, loss and grads on the shared batch."""
    tokens, mask, rng = _batch()
    weights = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)
    logits = nnx.jit(lambda m: m(tokens, mask))(model)
    return logits, _loss_and_grads(model, tokens, mask, weights), weights


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(3, 128, (B, T)), jnp.int32)
    mask = np.ones((B, T), bool)
    mask[1, :6] = False  # left padding
    mask[2, -4:] = False  # right padding
    return tokens, jnp.asarray(mask), rng


def _loss_and_grads(model, tokens, mask, weights):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        lp, ent = scoring.token_logps(nnx.merge(graphdef, p, rest), tokens, mask, with_entropy=True)
        return jnp.sum(lp * weights) + 0.1 * jnp.sum(ent)

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_option_gives_same_logits_and_grads(model, reference, name):
    tokens, mask, _ = _batch()
    ref, (ref_loss, ref_g), weights = reference
    other = with_execution(model, **OPTIONS[name])
    out = nnx.jit(lambda m: m(tokens, mask))(other)
    real = np.asarray(mask)
    assert float(np.abs(np.asarray(out - ref))[real].max()) <= TOL
    loss, g = _loss_and_grads(other, tokens, mask, weights)
    assert abs(float(loss - ref_loss)) <= TOL * abs(float(ref_loss))
    errs = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), ref_g, g)
    scale = max(jax.tree.leaves(jax.tree.map(lambda a: float(jnp.abs(a).max()), ref_g)))
    assert max(jax.tree.leaves(errs)) <= TOL * scale, errs


def test_blockwise_decoding_matches_full_forward(model):
    """Prefill + token-by-token decode through the blockwise kernel = one full pass."""
    blockwise = with_execution(model, attention="blockwise", attention_block=4)
    tokens, _, _ = _batch(1)
    mask = jnp.ones((2, 12), bool).at[1, :3].set(False)
    tokens = tokens[:2, :12]
    ref = nnx.jit(lambda m: m(tokens, mask))(model)
    step = nnx.jit(lambda m, ids, msk, c: m.forward(ids, msk, cache=c, logits="all"))
    cache = KVCache.zeros(model.config, 2, 16)
    out = step(blockwise, tokens[:, :7], mask[:, :7], cache)
    logits, cache = [out.logits], out.cache
    for i in range(7, 12):
        out = step(blockwise, tokens[:, i : i + 1], mask[:, i : i + 1], cache)
        logits.append(out.logits)
        cache = out.cache
    got = jnp.concatenate(logits, axis=1)
    real = np.asarray(mask)
    assert float(np.abs(np.asarray(got - ref))[real].max()) <= TOL


def _count(jaxpr, primitive):
    """How many `primitive` equations a jaxpr holds, sub-jaxprs (scan bodies) included."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == primitive
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _count(inner, primitive)
    return n


def test_scanned_program_does_not_grow_with_depth():
    """With scan_layers the traced forward holds one block's matmuls whatever L is."""
    tokens, mask, _ = _batch()

    def dots(layers, scan):
        m = init_model(tiny_config("qwen3", num_layers=layers, scan_layers=scan), seed=0)
        graphdef, state = nnx.split(m)
        fn = lambda s: nnx.merge(graphdef, s)(tokens, mask)  # noqa: E731
        return _count(jax.make_jaxpr(fn)(state).jaxpr, "dot_general")

    assert dots(2, True) == dots(4, True) < dots(4, False)


def test_lora_on_some_layers_falls_back_to_unrolled(model):
    """Blocks of different structure cannot stack; the scanned config still runs them."""
    tokens, mask, _ = _batch()
    adapted = nnx.merge(*nnx.split(model))
    add_lora(adapted, rank=2, alpha=4, layers=[1], rngs=nnx.Rngs(0))
    ref = nnx.jit(lambda m: m(tokens, mask))(adapted)
    out = nnx.jit(lambda m: m(tokens, mask))(with_execution(adapted, scan_layers=True))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=TOL)


def test_with_execution_rejects_architecture_changes(model):
    with pytest.raises(ValueError, match=r"not execution options: \['num_layers'\]"):
        with_execution(model, num_layers=2)


def test_dense_grads_equal_autodiff_of_dot():
    """layers.dense's hand backward (CPU layout) gives jnp.dot's gradients, 3-D inputs too."""
    from rlvr_jax.models.layers import dense

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 5, 6)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(6, 3)), jnp.float32)
    cot = jnp.asarray(rng.normal(size=(2, 5, 3)), jnp.float32)
    ours = jax.grad(lambda x, w: jnp.sum(dense(x, w) * cot), argnums=(0, 1))(x, w)
    ref = jax.grad(lambda x, w: jnp.sum(jnp.dot(x, w) * cot), argnums=(0, 1))(x, w)
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
