"""The RL trainer on a device mesh (config.mesh): same numbers as one device, really sharded."""

import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import validate

from .test_config import load_experiment
from .test_trainer import _parity_rewards

# Wall-clock and throughput fields differ between any two runs.
_TIMING = ("time", "rollout_seconds", "update_seconds", "step_seconds", "tokens_per_s")


def _config(mesh_shape):
    c = load_experiment("grpo", "pulse")  # 4 prompts x G=4, 2 minibatches, micro-batches of 4
    c.mesh.shape = mesh_shape
    c.eval.at_start = False
    c.loss.kl_coef = 0.05  # runs the reference scorer on the mesh
    c.loss.recompute_old_logps = True  # and the old-log-prob scorer
    return c


def _train_lines(workdir):
    lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    return [{k: v for k, v in x.items() if k not in _TIMING} for x in train]


def _run(mesh_shape, workdir):
    t = trainer_lib.Trainer.from_config(_config(mesh_shape), workdir)
    try:
        result = t.run()
    finally:
        t.io.close()
    return t, result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    _parity_rewards(mp)  # rewards that differ within groups: the updates really move the params
    try:
        out = {s: _run(s, tmp_path_factory.mktemp("mesh")) for s in [(1, 1, 1), (2, 2, 2)]}
    finally:
        mp.undo()
    return out


@pytest.mark.slow
def test_two_steps_on_mesh_222_equal_one_device(runs):
    (one, one_result), (sharded, sharded_result) = runs[(1, 1, 1)], runs[(2, 2, 2)]
    assert one.parts.mesh.devices.size == 1 and sharded.parts.mesh.devices.size == 8
    want, got = _train_lines(one.io.workdir), _train_lines(sharded.io.workdir)
    assert [x["step"] for x in got] == [1, 2]
    assert all(x["grad_norm"] > 0 and x["kl"] != 0 for x in got)  # a real update with KL
    assert [sorted(x) for x in got] == [sorted(x) for x in want]
    for w, g in zip(want, got, strict=True):
        assert {k: v for k, v in g.items() if isinstance(v, str)} == {
            k: v for k, v in w.items() if isinstance(v, str)
        }
        for k in (k for k in w if not isinstance(w[k], str)):
            np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert sharded_result.keys() == one_result.keys()
    for k in one_result:
        np.testing.assert_allclose(sharded_result[k], one_result[k], rtol=1e-5, err_msg=k)
    # Weights: Adam moves a weight by ~lr whatever its gradient's size, so where a gradient
    # is ~0, f32 reduction-order noise between the meshes can move it by up to ~lr per
    # step (seen: 4.2e-6 at lr 1e-4); that noise is far below lr elsewhere.
    lr = one.c.optimizer.lr
    for a, b in zip(jax.tree.leaves(one.state), jax.tree.leaves(sharded.state), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=0.1 * lr)
        if a.size > 1 and np.issubdtype(a.dtype, np.floating):  # and only in rare entries
            assert np.mean(~np.isclose(b, a, rtol=1e-5, atol=1e-6)) < 1e-3


@pytest.mark.slow
def test_params_and_optimizer_state_are_sharded_after_the_steps(runs):
    t, _ = runs[(2, 2, 2)]
    embed = t.state.params["embed_tokens"]  # [V, D]: "embed" (D) over fsdp
    assert embed.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp")
    assert embed.addressable_shards[0].data.nbytes == embed.nbytes // 2
    paths = jax.tree_util.tree_leaves_with_path(t.state.opt_state)
    moments = [x for p, x in paths if "embed_tokens" in jax.tree_util.keystr(p)]
    assert len(moments) == 2  # AdamW mu and nu, sharded like their parameter
    assert all(m.sharding.spec == embed.sharding.spec for m in moments)
    total = sum(x.nbytes for x in jax.tree.leaves(t.state.params))
    per_device = sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(t.state.params))
    assert per_device < 0.75 * total  # most bytes split over fsdp = 2, not replicated
    # The model the sampler reads holds the same sharded weights.
    assert t.parts.model.embed_tokens[...].sharding.spec == embed.sharding.spec


@pytest.mark.slow
def test_a_one_device_checkpoint_resumes_sharded_on_the_mesh(runs):
    one, _ = runs[(1, 1, 1)]
    # The mesh may change on resume.
    t = trainer_lib.Trainer.from_config(_config((2, 2, 2)), one.io.workdir)
    try:
        fresh = t.state
        restored, step = t.io.restore(t.state, t.parts.prompts)
    finally:
        t.io.close()
    assert step == 2
    assert t.parts.prompts.get_state() == one.parts.prompts.get_state()
    for a, b, f in zip(*(jax.tree.leaves(s) for s in (one.state, restored, fresh)), strict=True):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
        assert b.sharding.is_equivalent_to(f.sharding, b.ndim)  # onto the mesh's shardings
        assert math.prod(b.sharding.mesh.devices.shape) == 8


def test_micro_batch_rows_must_split_over_the_batch_shards():
    c = _config((2, 2, 2))
    c.train.micro_batch_size = 2  # 2 rows over data x fsdp = 4 shards
    with pytest.raises(ValueError, match=r"micro_batch_size = 2 .* 4 batch shards"):
        validate(c)
    c.mesh.shape = (1, -1, 1)  # -1: the other 8 devices, all on fsdp
    c.train.micro_batch_size = 4
    with pytest.raises(ValueError, match=r"8 batch shards"):
        validate(c)
    c.mesh.shape = (2, 1, 4)  # tensor does not split rows
    c.train.micro_batch_size = 2
    validate(c)
    c.mesh.shape = (1, -1, -1)
    with pytest.raises(ValueError, match=r"at most one -1"):
        validate(c)
