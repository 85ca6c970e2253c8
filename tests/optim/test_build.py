"""The optimizer a config names: validation, the RL builder, Muon's matrices vs the rest."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlvr_jax.optim import IsoState, build_optimizer
from rlvr_jax.rl.build import policy_optimizer
from rlvr_jax.rl.config import default_config, validate


def _params():
    rng = np.random.default_rng(0)
    return {
        "embed_tokens": jnp.asarray(rng.normal(size=(32, 16)), jnp.float32),
        "layers": {"0": {"mlp": {"up_proj": {"kernel": jnp.asarray(rng.normal(size=(16, 48)))}}}},
        "norm": {"weight": jnp.ones((16,))},
    }


def test_config_names_the_optimizer():
    c = default_config()
    assert c.optimizer.name == "adamw" and c.optimizer.iso.retraction == "qr"
    with c.unlocked():
        c.optimizer.name = "sgd"
    with pytest.raises(ValueError, match="optimizer.name = 'sgd'; valid: adamw, muon, iso"):
        validate(c)
    c = default_config()
    c.optimizer.iso.retraction = "cholesky"
    with pytest.raises(ValueError, match="optimizer.iso.retraction"):
        validate(c)


def test_policy_optimizer_builds_iso_from_the_config():
    c = default_config()
    c.optimizer.name = "iso"
    c.optimizer.iso.base = "muon"
    validate(c)
    opt = policy_optimizer(c)
    state = opt.init(_params())
    iso_state = state[1]  # after the clip
    assert isinstance(iso_state, IsoState)
    assert list(iso_state.u) == ["layers/0/mlp/up_proj/kernel"]


def test_muon_orthogonalises_matrices_and_leaves_embeddings_to_adamw():
    params = _params()
    grads = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(1), x.shape), params)
    lr = 1e-2
    muon = build_optimizer(lr, 10, name="muon", clip_norm=0.0)
    # optax.contrib.muon's AdamW part uses Nesterov momentum, like its Muon part.
    adamw = optax.adamw(lr, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.0, nesterov=True)
    upd, _ = muon.update(grads, muon.init(params), params)
    ref, _ = adamw.update(grads, adamw.init(params), params)
    # AdamW's part: the embedding and the norm step exactly like (Nesterov) AdamW.
    np.testing.assert_allclose(upd["embed_tokens"], ref["embed_tokens"], rtol=1e-6)
    np.testing.assert_allclose(upd["norm"]["weight"], ref["norm"]["weight"], rtol=1e-6)
    # Muon's part: a near-orthogonal step (flat spectrum) of RMS 0.2·lr (consistent_rms).
    step = np.asarray(upd["layers"]["0"]["mlp"]["up_proj"]["kernel"])
    sv = np.linalg.svd(step, compute_uv=False)
    assert sv.min() > 0.5 * sv.max()
    assert abs(np.sqrt(np.mean(step**2)) - 0.2 * lr) < 0.1 * 0.2 * lr
    assert not np.allclose(step, ref["layers"]["0"]["mlp"]["up_proj"]["kernel"], rtol=0.1)
    optax.apply_updates(params, upd)
