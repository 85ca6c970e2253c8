"""Stage mesh and precision (`pipeline.execution`): the SFT blocks shard, one call sets all."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models import init_model, save_pretrained
from rlvr_jax.models.tiny import tiny_config
from rlvr_jax.pipeline import execution, sft
from rlvr_jax.pipeline.config import add_stage, pipeline_config, validate
from rlvr_jax.train import sft as sft_train


def test_sft_config_has_no_execution_blocks_until_added():
    c = sft.sft_config()
    assert not execution.has_execution(c)  # the JSON of older pipelines is unchanged
    execution.add_execution(c)
    assert tuple(c.mesh.shape) == (1, 1, 1) and c.mesh.rules == "fsdp"
    assert (c.model.param_dtype, c.model.dtype, c.model.remat) == ("float32", "float32", "none")
    assert c.is_locked
    with pytest.raises(AttributeError):
        c.model.dtpye = "bfloat16"  # a typo is an error: the blocks are locked
    c.model.dtype = "float16"
    with pytest.raises(ValueError, match=r"run\.model\.dtype = 'float16'"):
        sft.check(c, where="run", earlier=[])
    c.model.dtype, c.mesh.shape = "bfloat16", (1, 3, 1)
    with pytest.raises(ValueError, match=r"run\.train\.batch_size = 16 .* 3 batch shards"):
        sft.check(c, where="run", earlier=[])


def test_apply_sets_every_trainable_stage_and_leaves_merge():
    c = pipeline_config()
    add_stage(c, "sft", "sft")
    add_stage(c, "a", "rl")
    add_stage(c, "b", "rl", init="sft")
    merge = add_stage(c, "merge", "merge")
    merge.run.specialists = "a,b"
    add_stage(c, "dpo", "dpo")
    before = merge.run.to_json()
    execution.apply(c, mesh_shape=(1, 4, 2), rules="fsdp_tp", dtype="bfloat16", remat="block")
    for name in ("sft", "a", "b", "dpo"):
        run = c.stages[name].run
        assert tuple(run.mesh.shape) == (1, 4, 2) and run.mesh.rules == "fsdp_tp", name
        assert (run.model.dtype, run.model.remat, run.model.param_dtype) == (
            "bfloat16",
            "block",
            "float32",
        )
    assert merge.run.to_json() == before
    for name in ("a", "b", "dpo"):  # the RL micro-batch must split over 4 shards
        c.stages[name].run.train.micro_batch_size = 4
    c.stages.sft.run.train.batch_size = 16
    validate(c)
    with pytest.raises(ValueError, match="valid: param_dtype"):
        execution.apply(c, mesh_shape=(1, 1, 1), precision="bf16")


def _batch(rows: int, length: int, vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    encoded = []
    for i in range(rows):
        n = length - i % 3
        mask = np.arange(n) >= n // 2  # a prompt half, then the completion
        encoded.append((rng.integers(1, vocab, n).astype(np.int32), mask))
    return sft_train.pad_batch(encoded, length, 0)


def _train(c, init_dir, batches):
    """What the SFT stage's loop does with the model `execution.load_policy` placed."""
    model, mesh, rules = execution.load_policy(c, init_dir)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = sft_train.make_optimizer(1e-2, len(batches), end_lr_fraction=0.1)
    rows = execution.has_execution(c)
    step_fn = sft_train.make_train_step(
        graphdef, optimizer, mesh=mesh if rows else None, rules=rules
    )
    state = sft_train.TrainState(
        jax.tree.map(jnp.copy, params), optimizer.init(params), jnp.zeros((), jnp.int32)
    )
    if mesh is not None:
        state = sharding.shard_state(state, mesh, rules)
    losses = []
    for batch in batches:
        if mesh is not None:
            batch = jax.device_put(batch, sharding.batch_sharding(mesh))
        state, metrics = step_fn(state, rest, batch)
        losses.append(float(metrics["loss"]))
    return model, state, losses


def test_sft_mesh_shards_and_equals_one_device(tmp_path):
    config = tiny_config("qwen3", max_position_embeddings=64)
    save_pretrained(init_model(config, seed=0), config, tmp_path)
    batches = [_batch(8, 16, config.vocab_size, seed) for seed in range(2)]

    plain = sft.sft_config()
    _, one, losses_one = _train(plain, str(tmp_path), batches)

    sharded = execution.add_execution(sft.sft_config())
    sharded.mesh.shape = (1, 4, 1)
    model, four, losses_four = _train(sharded, str(tmp_path), batches)
    embed = nnx.state(model, nnx.Param)["embed_tokens"][...]
    assert len(embed.sharding.device_set) == 4  # the model is placed on the mesh...
    assert not embed.sharding.is_fully_replicated  # ...and split over fsdp
    leaf = jax.tree.leaves(four.params)[0]
    assert len(leaf.sharding.device_set) == 4
    np.testing.assert_allclose(losses_four, losses_one, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(four.params), jax.tree.leaves(one.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_sft_precision_fields_load_the_model_in_those_dtypes(tmp_path):
    config = tiny_config("qwen3", max_position_embeddings=64)
    save_pretrained(init_model(config, seed=0), config, tmp_path)
    c = execution.add_execution(sft.sft_config())
    c.model.param_dtype, c.model.dtype, c.model.remat = "bfloat16", "bfloat16", "block"
    model, mesh, _ = execution.load_policy(c, str(tmp_path))
    assert mesh.devices.size == 1
    assert (model.config.param_dtype, model.config.dtype, model.config.remat) == (
        "bfloat16",
        "bfloat16",
        "block",
    )
    assert nnx.state(model, nnx.Param)["embed_tokens"][...].dtype == jnp.bfloat16


@pytest.mark.slow
def test_sft_stage_on_a_mesh_equals_the_stage_without_one(tmp_path):
    """The SFT stage itself (pipeline runner, 4 steps of the pulse): on a (1, 4, 1) mesh
    with its rows split, the export equals the one-device export to float rounding."""
    from rlvr_jax.models import load_pretrained
    from rlvr_jax.pipeline.config import apply_pulse
    from rlvr_jax.pipeline.merge import model_tensors
    from rlvr_jax.pipeline.run import run

    def pipeline(mesh):
        c = pipeline_config()
        s = add_stage(c, "sft", "sft")
        apply_pulse(c)
        s.run.train.steps = 4
        c.eval.enabled = False
        if mesh:
            execution.apply(c, mesh_shape=mesh)
        return c

    exports = {}
    for label, mesh in (("one", None), ("four", (1, 4, 1))):
        out = run(pipeline(mesh), tmp_path / label)
        assert out["stages"]["sft"]["steps"] == 4
        stage = tmp_path / label / "stages" / "sft"
        written = json.loads((stage / "config.json").read_text())
        assert written.get("mesh", {}).get("shape") == (list(mesh) if mesh else None)
        export = stage / "export"
        exports[label] = model_tensors(load_pretrained(export)[0])
    for name, want in exports["one"].items():
        np.testing.assert_allclose(exports["four"][name], want, rtol=1e-4, atol=1e-6)
