"""ISO: retractions, frame gradients, fixed spectrum + orthonormal frames over many steps,
the base optimizer untouched on other params, sharded = unsharded, usable by SFT."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models import init_model
from rlvr_jax.optim import build_optimizer, iso, retract, spectrum_drift
from rlvr_jax.optim.iso import flatten, frame_grads
from rlvr_jax.testing import tiny_config


def _orth_err(u):
    u = np.asarray(u, np.float64)
    return np.abs(u.T @ u - np.eye(u.shape[1])).max()


@pytest.mark.parametrize("method", ["qr", "polar"])
def test_retraction_is_orthonormal_and_fixes_orthonormal_input(method):
    x = np.random.default_rng(0).normal(size=(12, 5)).astype(np.float32)
    q = np.asarray(retract(x, method))
    assert _orth_err(q) < 1e-5
    # A retraction spans the same columns space (QR) or is the nearest such matrix (polar).
    if method == "qr":  # x = q r with r upper triangular, positive diagonal
        r = q.T @ x
        np.testing.assert_allclose(np.tril(r, -1), 0, atol=1e-5)
        assert (np.diag(r) > 0).all()
    else:  # NumPy reference: P Qᵀ of the SVD
        p, _, qt = np.linalg.svd(x.astype(np.float64), full_matrices=False)
        np.testing.assert_allclose(q, p @ qt, atol=1e-5)
    np.testing.assert_allclose(np.asarray(retract(q, method)), q, atol=1e-6)


def test_frame_grads_match_autodiff():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    target = rng.normal(size=(6, 4)).astype(np.float32)
    u, s, vt = np.linalg.svd(w, full_matrices=False)

    def loss_w(w):
        return jnp.sum(jnp.sin(w) * target)

    g = jax.grad(loss_w)(jnp.asarray(w))
    gu, gvt = frame_grads(g, jnp.asarray(u), jnp.asarray(s), jnp.asarray(vt))
    ref_u = jax.grad(lambda u: loss_w((u * s) @ vt))(jnp.asarray(u))
    ref_vt = jax.grad(lambda vt: loss_w((u * s) @ vt))(jnp.asarray(vt))
    np.testing.assert_allclose(gu, ref_u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gvt, ref_vt, rtol=1e-5, atol=1e-6)


def _toy_params():
    rng = np.random.default_rng(2)
    return {
        "a": {"q_proj": {"kernel": jnp.asarray(rng.normal(size=(16, 8)), jnp.float32)}},
        "b": {"up_proj": {"kernel": jnp.asarray(rng.normal(size=(8, 24)), jnp.float32)}},
        "norm": {"weight": jnp.ones((8,), jnp.float32)},
        "embed_tokens": jnp.asarray(rng.normal(size=(10, 8)), jnp.float32),
    }


@pytest.mark.parametrize("base", ["adamw", "muon"])
@pytest.mark.parametrize("retraction", ["qr", "polar"])
def test_spectrum_fixed_and_frames_orthonormal_after_many_steps(base, retraction):
    params = _toy_params()
    opt = build_optimizer(
        3e-2, 300, name="iso", iso=dict(base=base, retraction=retraction), weight_decay=0.1
    )
    state = opt.init(params)

    @jax.jit
    def step(p, st, key):
        grads = jax.tree.map(lambda x: jax.random.normal(key, x.shape), p)
        upd, st = opt.update(grads, st, p)
        return optax.apply_updates(p, upd), st

    p = params
    for i in range(300):
        p, state = step(p, state, jax.random.PRNGKey(i))
    iso_state = state[1]
    for path in ("a/q_proj/kernel", "b/up_proj/kernel"):
        w0, w1 = np.asarray(flatten(params)[path]), np.asarray(flatten(p)[path])
        s0 = np.linalg.svd(w0, compute_uv=False)
        np.testing.assert_allclose(np.linalg.svd(w1, compute_uv=False), s0, rtol=1e-5, atol=1e-5)
        assert np.abs(w1 - w0).max() > 0.3 * np.abs(w0).max()  # it did move
        assert _orth_err(iso_state.u[path]) < 1e-5
        assert _orth_err(np.asarray(iso_state.vt[path]).T) < 1e-5
        u, s, vt = iso_state.u[path], iso_state.s[path], iso_state.vt[path]
        np.testing.assert_allclose((np.asarray(u) * np.asarray(s)) @ vt, w1, atol=1e-5)
    assert sorted(iso_state.u) == ["a/q_proj/kernel", "b/up_proj/kernel"]
    assert spectrum_drift(params, p, r"(q_proj|up_proj)/kernel$") < 1e-5
    assert spectrum_drift(params, p, r"embed_tokens") > 1e-2
    # The embedding and the norm are not reparametrised: their spectrum moves.
    e0, e1 = params["embed_tokens"], p["embed_tokens"]
    assert not np.allclose(np.linalg.svd(e0, compute_uv=False), np.linalg.svd(e1, compute_uv=False))


def test_other_params_get_the_base_update_exactly():
    params = _toy_params()
    base = optax.adam(1e-2)
    opt = iso(base)
    st, st_ref = opt.init(params), base.init(params)
    grads = jax.tree.map(lambda x: jnp.full(x.shape, 0.5), params)
    upd, _ = opt.update(grads, st, params)
    ref, _ = base.update(grads, st_ref, params)
    for leaf in ("embed_tokens",):
        np.testing.assert_array_equal(upd[leaf], ref[leaf])
    np.testing.assert_array_equal(upd["norm"]["weight"], ref["norm"]["weight"])


def test_iso_errors_name_the_problem():
    with pytest.raises(ValueError, match="retraction 'lu'"):
        iso(optax.sgd(0.1), retraction="lu")
    with pytest.raises(ValueError, match="no 2-D parameter"):
        iso(optax.sgd(0.1), include="nothing").init(_toy_params())
    opt = iso(optax.sgd(0.1))
    with pytest.raises(ValueError, match="needs params"):
        opt.update(_toy_params(), opt.init(_toy_params()))
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        build_optimizer(0.1, 10, name="sgd")


def test_sharded_iso_update_equals_unsharded():
    """fsdp over 8 devices: the frames are sharded like their matrices, the step is the same."""
    model = init_model(tiny_config(), seed=0)
    _, params, _ = nnx.split(model, nnx.Param, ...)
    opt = build_optimizer(1e-2, 10, name="iso")
    grads = jax.tree.map(
        lambda x: jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape), params
    )

    def two_steps(p, st):
        for _ in range(2):
            upd, st = opt.update(grads, st, p)
            p = optax.apply_updates(p, upd)
        return p, st

    ref_p, ref_st = jax.jit(two_steps)(params, opt.init(params))

    mesh = sharding.make_mesh((1, 8, 1))
    p_sh = sharding.tree_shardings(params, mesh, "fsdp")
    state = opt.init(params)
    st_sh = sharding.tree_shardings(state, mesh, "fsdp", strict=False)
    u_spec = st_sh[1].u["layers/0/self_attn/q_proj/kernel"].spec
    assert u_spec == jax.sharding.PartitionSpec("fsdp")  # rows like W's "embed" rows
    fn = jax.jit(two_steps, in_shardings=(p_sh, st_sh), out_shardings=(p_sh, st_sh))
    p, st = fn(jax.device_put(params, p_sh), jax.device_put(state, st_sh))
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(ref_p), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)
    u = st[1].u["layers/1/mlp/down_proj/kernel"]
    assert len(u.sharding.device_set) == 8 and _orth_err(u) < 1e-5


def test_sft_trains_with_iso_and_keeps_the_spectrum():
    from rlvr_jax.train.sft import train_sft
    from rlvr_jax.train.warmstart import default_tokenizer

    tok = default_tokenizer()
    cfg = tiny_config(vocab_size=tok.vocab_size, eos_token_id=tok.eos_id)
    model = init_model(cfg, seed=0)
    w0 = np.asarray(model.layers[0].mlp.up_proj.kernel[...])
    examples = [(f"Say {i}", f"{i} {i + 1}") for i in range(8)]
    opt = build_optimizer(3e-2, 30, name="iso", clip_norm=1.0)
    result = train_sft(
        model, tok, examples, steps=30, batch_size=4, lr=0.0, optimizer=opt, log_every=10
    )
    assert result.history[-1]["loss"] < 0.7 * result.history[0]["loss"]
    w1 = np.asarray(model.layers[0].mlp.up_proj.kernel[...])
    assert np.abs(w1 - w0).max() > 1e-3
    np.testing.assert_allclose(
        np.linalg.svd(w1, compute_uv=False),
        np.linalg.svd(w0, compute_uv=False),
        rtol=1e-5,
        atol=1e-6,
    )
