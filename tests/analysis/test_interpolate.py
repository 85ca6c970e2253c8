"""Late-layer interpolation: α = 0 and α = 1 return the two endpoints exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.analysis.entrance import parse_block
from rlvr_jax.analysis.interpolate import interpolate_layers, layer_block, layer_of
from rlvr_jax.models import init_model
from rlvr_jax.optim.iso import flatten
from rlvr_jax.testing import tiny_config


@pytest.fixture(scope="module")
def endpoints():
    cfg = tiny_config(num_layers=4)
    rl = nnx.state(init_model(cfg, seed=0), nnx.Param)
    early = nnx.state(init_model(cfg, seed=1), nnx.Param)
    return rl, early


def test_alpha_zero_and_one_are_the_endpoints(endpoints):
    rl, early = endpoints
    block = [2, 3]
    at0 = flatten(interpolate_layers(rl, early, 0.0, block))
    at1 = flatten(interpolate_layers(rl, early, 1.0, block))
    f_rl, f_early = flatten(rl), flatten(early)
    for path in f_rl:
        np.testing.assert_array_equal(at0[path], f_rl[path])
        want = f_early[path] if layer_of(path) in block else f_rl[path]
        np.testing.assert_array_equal(at1[path], want)
    # The block really differs between the endpoints (else the test proves nothing).
    assert not np.array_equal(
        f_rl["layers/3/mlp/up_proj/kernel"], f_early["layers/3/mlp/up_proj/kernel"]
    )
    half = flatten(interpolate_layers(rl, early, 0.5, block))
    p = "layers/2/self_attn/q_proj/kernel"
    np.testing.assert_allclose(half[p], 0.5 * (f_rl[p] + f_early[p]), rtol=1e-6)
    np.testing.assert_array_equal(
        half["layers/1/self_attn/q_proj/kernel"], f_rl["layers/1/self_attn/q_proj/kernel"]
    )
    np.testing.assert_array_equal(half["embed_tokens"], f_rl["embed_tokens"])


def test_bfloat16_params_keep_their_dtype(endpoints):
    rl, early = (jax.tree.map(lambda x: x.astype(jnp.bfloat16), t) for t in endpoints)
    out = interpolate_layers(rl, early, 1.0, [0])
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(out))
    np.testing.assert_array_equal(
        flatten(out)["layers/0/mlp/up_proj/kernel"], flatten(early)["layers/0/mlp/up_proj/kernel"]
    )


def test_blocks_and_errors(endpoints):
    assert layer_of("layers/12/mlp/up_proj/kernel") == 12 and layer_of("embed_tokens") is None
    assert layer_block(4, -2) == [2, 3] and layer_block(6, 1, 3) == [1, 2]
    assert parse_block("-2:", 4) == [2, 3] and parse_block(":1", 4) == [0]
    with pytest.raises(ValueError, match="select no layer"):
        layer_block(4, 5)
    with pytest.raises(ValueError, match="start:stop"):
        parse_block("2", 4)
    rl, early = endpoints
    with pytest.raises(ValueError, match="alpha"):
        interpolate_layers(rl, early, 1.5, [0])
    with pytest.raises(ValueError, match="structures"):
        interpolate_layers({"a": jnp.zeros(2)}, {"b": jnp.zeros(2)}, 0.5, [0])
