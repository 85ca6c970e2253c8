"""Loading the policies an analysis compares: a saved RL step's params, a model directory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.analysis import checkpoints
from rlvr_jax.models import init_model
from rlvr_jax.optim import build_optimizer
from rlvr_jax.optim.iso import flatten
from rlvr_jax.rl.update import RLState
from rlvr_jax.run.checkpointing import RunCheckpointer
from rlvr_jax.testing import tiny_config


def test_step_params_restores_the_policy_of_a_saved_rl_state(tmp_path):
    like = nnx.state(init_model(tiny_config(), seed=0), nnx.Param)
    saved = jax.tree.map(lambda x: 2 * x + 1, like)
    opt = build_optimizer(1e-3, 10, name="iso")  # any optimizer state rides along
    state = RLState(
        params=saved,
        opt_state=opt.init(saved),
        critic_params=None,
        critic_opt_state=None,
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(0),
    )
    with RunCheckpointer(tmp_path / "checkpoints") as ckpt:
        ckpt.save(3, state)
    got = flatten(checkpoints.step_params(tmp_path, 3, like))
    for path, x in flatten(saved).items():
        np.testing.assert_array_equal(got[path], x)
    with pytest.raises(FileNotFoundError, match="no checkpoint step 4"):
        checkpoints.step_params(tmp_path, 4, like)
    with pytest.raises(FileNotFoundError, match="not an RL run workdir"):
        checkpoints.run_config(tmp_path)
