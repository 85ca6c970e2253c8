"""Tests of rlvr_jax.run.checkpointing: orbax run checkpoints and the preemption guard."""

import os
import shutil
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx, struct

from rlvr_jax.models import abstract_model
from rlvr_jax.run.checkpointing import PreemptionGuard, RunCheckpointer
from rlvr_jax.testing import tiny_config


@struct.dataclass
class TrainState:
    """Shaped like the RL trainer's state: params, optimizer state, step, PRNG key."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array


@struct.dataclass
class StateWithoutRng:
    params: Any
    opt_state: Any
    step: jax.Array


def _fill(abstract_tree, seed: int):
    """Random values of each leaf's shape and dtype (numpy: no per-op compiles)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda s: jnp.asarray((rng.standard_normal(s.shape) * 10).astype(s.dtype)), abstract_tree
    )


@pytest.fixture(scope="module")
def train_state():
    # The trainer's state structure: nnx.Param state of the tiny model and its
    # AdamW state. Values are random (non-zero moments, so a mu/nu mix-up shows);
    # shapes come from eval_shape because eager init costs seconds on 2 cores.
    model = abstract_model(tiny_config())
    _, params_abstract, _ = nnx.split(model, nnx.Param, ...)
    params = _fill(params_abstract, seed=0)
    opt_state = _fill(jax.eval_shape(optax.adamw(1e-3).init, params), seed=1)
    rng = jax.random.fold_in(jax.random.PRNGKey(0), 7)  # uint32[2], not all zero
    return TrainState(params=params, opt_state=opt_state, step=jnp.int32(17), rng=rng)


def _flat(tree):
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path): leaf for path, leaf in leaves}


def _assert_bitwise_equal(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    flat_a, flat_e = _flat(actual), _flat(expected)
    assert list(flat_a) == list(flat_e)
    for key, e in flat_e.items():
        a = flat_a[key]
        assert a.dtype == e.dtype, key
        assert a.shape == e.shape, key
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e), err_msg=key)


def _small(value: float):
    return {"w": jnp.full((3,), value, jnp.float32), "n": jnp.int32(value)}


@pytest.mark.parametrize("async_save", [False, True])
def test_roundtrip_is_bitwise(tmp_path, train_state, async_save):
    data_state = {"grain": {"next_index": 12, "epoch": 0}, "pipeline": {"batch_size": 4}}
    meta = {"config": {"lr": 1e-6, "name": "grpo"}, "metrics": {"reward": np.float32(0.25)}}
    saved = jax.tree.map(jnp.copy, train_state)
    with RunCheckpointer(tmp_path / "ckpt", async_save=async_save) as ckpt:
        assert ckpt.save(17, saved, data_state=data_state, meta=meta)
        # The trainer donates the state to the next step right after saving.
        jax.tree.map(lambda x: x.delete(), saved)
        ckpt.wait()
        state, data, got_meta = ckpt.restore(jax.eval_shape(lambda: train_state))
    assert type(state) is TrainState
    _assert_bitwise_equal(state, train_state)
    assert state.rng.dtype == jnp.uint32 and state.rng.shape == (2,)
    assert data == data_state
    assert got_meta == {"config": {"lr": 1e-6, "name": "grpo"}, "metrics": {"reward": 0.25}}


def test_restore_from_concrete_state_and_without_data(tmp_path, train_state):
    ckpt = RunCheckpointer(tmp_path)
    ckpt.save(1, train_state)
    state, data, meta = ckpt.restore(train_state)
    _assert_bitwise_equal(state, train_state)
    assert data is None and meta == {}
    ckpt.close()


def test_keep_last_k_latest_and_specific_step(tmp_path):
    ckpt = RunCheckpointer(tmp_path, keep=2)
    assert ckpt.latest_step() is None and ckpt.all_steps() == []
    for step in (10, 20, 30, 40):
        assert ckpt.save(step, _small(step), meta={"step": step})
    assert ckpt.latest_step() == 40
    assert ckpt.all_steps() == [30, 40]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["30", "40"]

    state, _, meta = ckpt.restore(_small(0), step=30)
    np.testing.assert_array_equal(state["w"], np.full(3, 30.0, np.float32))
    assert int(state["n"]) == 30 and meta == {"step": 30}
    state, _, meta = ckpt.restore(_small(0))
    assert int(state["n"]) == 40 and meta == {"step": 40}

    # A step already on disk is not overwritten, even when forced.
    assert not ckpt.save(40, _small(-1.0), force=True)
    assert int(ckpt.restore(_small(0))[0]["n"]) == 40
    with pytest.raises(FileNotFoundError, match=r"step 10 .*saved steps: \[30, 40\]"):
        ckpt.restore(_small(0), step=10)
    ckpt.close()

    # A new checkpointer (a resumed run) sees the same steps.
    assert RunCheckpointer(tmp_path, keep=2).all_steps() == [30, 40]


def test_restore_empty_directory_names_it(tmp_path):
    ckpt = RunCheckpointer(tmp_path / "empty_run")
    with pytest.raises(FileNotFoundError, match="no checkpoint in .*empty_run"):
        ckpt.restore(_small(0))


def test_structure_mismatch_names_the_key_path(tmp_path, train_state):
    ckpt = RunCheckpointer(tmp_path)
    ckpt.save(1, {"a": jnp.zeros(2), "b": {"c": jnp.ones(3)}})
    with pytest.raises(
        ValueError, match="no saved value for b/d; the checkpoint has instead e.g. b/c"
    ):
        ckpt.restore({"a": jnp.zeros(2), "b": {"d": jnp.ones(3)}})
    with pytest.raises(ValueError, match=r"b/c has shape \(3,\) in the checkpoint, \(4,\)"):
        ckpt.restore({"a": jnp.zeros(2), "b": {"c": jnp.ones(4)}})

    # A train state without the PRNG key: the saved `rng` is the first extra path.
    ckpt.save(2, train_state)
    smaller = StateWithoutRng(train_state.params, train_state.opt_state, train_state.step)
    with pytest.raises(ValueError, match="the checkpoint has rng, which the train state lacks"):
        ckpt.restore(jax.eval_shape(lambda: smaller))


def test_crash_mid_save_is_ignored(tmp_path):
    ckpt = RunCheckpointer(tmp_path)
    ckpt.save(1, _small(1))
    ckpt.save(2, _small(2))
    ckpt.close()
    # A run killed while writing step 3: orbax's temporary directory, half written.
    partial = tmp_path / "3.orbax-checkpoint-tmp-1700000000000000"
    shutil.copytree(tmp_path / "2", partial)
    shutil.rmtree(partial / "state")
    (partial / "meta").mkdir(exist_ok=True)

    resumed = RunCheckpointer(tmp_path)
    assert resumed.latest_step() == 2 and resumed.all_steps() == [1, 2]
    state, _, _ = resumed.restore(_small(0))
    assert int(state["n"]) == 2
    # The resumed run saves step 3 for real.
    assert resumed.save(3, _small(3))
    assert int(resumed.restore(_small(0))[0]["n"]) == 3
    resumed.close()


def test_restore_onto_sharded_abstract_state(tmp_path, train_state):
    assert jax.device_count() == 8
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", None))
    embed_key = "['embed_tokens']"

    def place(path, leaf):
        is_embed = path[0].name == "params" and embed_key in jax.tree_util.keystr(path)
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharded) if is_embed else leaf

    abstract = jax.tree_util.tree_map_with_path(place, jax.eval_shape(lambda: train_state))
    ckpt = RunCheckpointer(tmp_path)
    ckpt.save(1, train_state)
    state, _, _ = ckpt.restore(abstract)
    _assert_bitwise_equal(state, train_state)
    placed = {k: v.sharding for k, v in _flat(state).items()}
    embed = [k for k in placed if k.startswith(".params") and embed_key in k]
    assert len(embed) == 1
    assert placed[embed[0]] == sharded
    assert len({s.device for s in _flat(state)[embed[0]].addressable_shards}) == 8
    # Every other leaf goes where jax puts unplaced arrays: the first device.
    others = {s for k, s in placed.items() if k != embed[0]}
    assert others == {jax.sharding.SingleDeviceSharding(jax.devices()[0])}

    # A sharded save restores unsharded, with the same values.
    ckpt.save(2, state)
    unsharded, _, _ = ckpt.restore(jax.eval_shape(lambda: train_state), step=2)
    _assert_bitwise_equal(unsharded, train_state)
    assert _flat(unsharded)[embed[0]].sharding == jax.sharding.SingleDeviceSharding(
        jax.devices()[0]
    )
    ckpt.close()


def test_save_rejects_non_json(tmp_path):
    ckpt = RunCheckpointer(tmp_path)
    with pytest.raises(TypeError, match="meta is not JSON-serialisable: a object"):
        ckpt.save(1, _small(1), meta={"x": object()})
    with pytest.raises(ValueError, match="keep must be >= 1, got 0"):
        RunCheckpointer(tmp_path, keep=0)
    assert ckpt.all_steps() == []


def _wait_for(guard: PreemptionGuard) -> None:
    # The signal may be delivered to another thread of the process; Python runs
    # the handler in the main thread at its next check, so allow a moment.
    deadline = time.monotonic() + 2.0
    while not guard.requested and time.monotonic() < deadline:
        time.sleep(0.001)


def test_preemption_guard_sets_flag_and_restores_handler():
    calls = []

    def previous(signum, frame):
        calls.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        with PreemptionGuard() as guard:
            assert not guard.requested and guard.signal_name is None
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_for(guard)
            assert guard.requested and guard.signal_name == "SIGTERM"
            assert calls == []  # the previous handler did not run
        assert signal.getsignal(signal.SIGTERM) is previous
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while not calls and time.monotonic() < deadline:
            time.sleep(0.001)
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, original)


def test_preemption_guard_sigint():
    original_int = signal.getsignal(signal.SIGINT)
    original_term = signal.getsignal(signal.SIGTERM)
    with PreemptionGuard(signals=(signal.SIGTERM, signal.SIGINT)) as guard:
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(guard)
        assert guard.requested and guard.signal_name == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is original_int
    assert signal.getsignal(signal.SIGTERM) is original_term
