"""rlvr_jax.distributed: single-process behaviour here, and two real CPU processes (slow)."""

import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from rlvr_jax import distributed, sharding
from rlvr_jax.testing import launch_processes

ROOT = Path(__file__).resolve().parents[1]


def test_initialize_is_a_no_op_for_a_single_process(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    assert distributed.initialize(env={}) is False
    assert distributed.initialize(num_processes=1, env={}) is False
    assert distributed.initialize(env={distributed.ENV_NUM_PROCESSES: "1"}) is False
    assert calls == []


def test_initialize_passes_flags_then_env_and_auto_uses_the_no_arg_form(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    assert distributed.initialize("h:1", 4, 3, env={}) is True
    env = {
        distributed.ENV_COORDINATOR: "coord:1234",
        distributed.ENV_NUM_PROCESSES: "2",
        distributed.ENV_PROCESS_ID: "1",
    }
    assert distributed.initialize(env=env) is True
    assert distributed.initialize(process_id=0, env=env) is True  # a flag beats its env var
    assert distributed.initialize(auto=True, env={}) is True
    assert distributed.initialize(env={distributed.ENV_AUTO: "1"}) is True
    explicit = [
        dict(coordinator_address=c, num_processes=n, process_id=i)
        for c, n, i in (("h:1", 4, 3), ("coord:1234", 2, 1), ("coord:1234", 2, 0))
    ]
    assert calls == [((), k) for k in explicit] + [((), {}), ((), {})]


def test_initialize_rejects_partial_or_inconsistent_settings(monkeypatch):
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: pytest.fail("called"))
    with pytest.raises(ValueError, match=r"missing: .*process_id \(RLVR_PROCESS_ID\)"):
        distributed.initialize("h:1", 2, env={})
    with pytest.raises(ValueError, match=r"process_id = 2"):
        distributed.initialize("h:1", 2, 2, env={})
    with pytest.raises(ValueError, match=r"RLVR_NUM_PROCESSES='two' is not an integer"):
        distributed.initialize(env={distributed.ENV_NUM_PROCESSES: "two"})


def test_single_process_helpers():
    assert distributed.is_logging_process()
    assert distributed.agree(False) is False and distributed.agree(True) is True
    assert distributed.everyone(False) is False and distributed.everyone(True) is True
    assert distributed.iterator_state_name() == "process_0-of-1.json"
    assert distributed.iterator_state_name(3, 8) == "process_3-of-8.json"
    distributed.sync("noop")  # returns at once with one process


def test_single_process_reductions_and_rows_are_the_identity():
    v = np.array([3, -1])
    np.testing.assert_array_equal(distributed.max_over_processes(v), v)
    np.testing.assert_array_equal(distributed.sum_over_processes(v), v)
    obj = {"prompt_R": np.arange(3), "name": "x"}
    (got,) = distributed.allgather_objects(obj)
    assert got is obj
    mesh = sharding.make_mesh((2, 2, 2))
    distributed.check_rows_split(mesh)  # one process holds every row
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(
        distributed.host_rows(jax.device_put(x, sharding.batch_sharding(mesh))), x
    )


def test_host_local_to_global_is_the_batch_sharded_over_the_mesh():
    mesh = sharding.make_mesh((2, 2, 2))
    rng = np.random.default_rng(0)
    batch = {
        "tokens_BxT": rng.integers(0, 9, (8, 5)),
        "rewards_B": rng.normal(size=8).astype(np.float32),
    }
    out = distributed.host_local_to_global(batch, mesh)
    for k, x in batch.items():
        np.testing.assert_array_equal(np.asarray(out[k]), x)
        assert out[k].sharding.is_equivalent_to(sharding.batch_sharding(mesh), x.ndim)
        assert out[k].addressable_shards[0].data.shape[0] == 2  # 8 rows over data x fsdp = 4
    back = distributed.to_host(out)
    assert all(isinstance(back[k], np.ndarray) for k in back)
    np.testing.assert_array_equal(back["tokens_BxT"], batch["tokens_BxT"])
    # Per-leaf shardings: [n_micro, rows, T] micro-batches split on dim 1.
    mb = rng.normal(size=(2, 4, 3)).astype(np.float32)
    got = distributed.host_local_to_global([mb], mesh, [sharding.batch_sharding(mesh, 1)])
    np.testing.assert_array_equal(np.asarray(got[0]), mb)
    assert got[0].addressable_shards[0].data.shape == (2, 1, 3)


_WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from rlvr_jax import distributed
    port, pid = sys.argv[1], int(sys.argv[2])
    assert distributed.initialize(f"localhost:{port}", 2, pid, env={})
    import jax
    from rlvr_jax import sharding
    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    assert distributed.is_logging_process() == (pid == 0)
    mesh = sharding.make_mesh((1, -1, 1))  # 4 devices over both processes
    # Each process feeds its own 2 rows: process p holds rows 2p, 2p + 1 of the global batch.
    local = np.arange(2 * 3, dtype=np.float32).reshape(2, 3) + 100 * pid
    x = distributed.host_local_to_global(local, mesh)
    assert x.shape == (4, 3) and not x.is_fully_addressable
    total = jax.jit(lambda a: (a * a).sum(), out_shardings=sharding.replicated(mesh))(x)
    whole = distributed.to_host(x)
    want = np.concatenate([np.arange(6.0).reshape(2, 3) + 100 * p for p in range(2)])
    np.testing.assert_array_equal(whole, want)
    np.testing.assert_allclose(float(total), (want * want).sum(), rtol=1e-6)
    assert distributed.agree(pid == 1) is True and distributed.agree(False) is False
    assert distributed.everyone(pid == 1) is False and distributed.everyone(True) is True
    # Back to this process's rows; with a jitted op in between, rows stay with their host.
    np.testing.assert_array_equal(distributed.host_rows(x), local)
    y = jax.jit(lambda a: a * 2, out_shardings=sharding.batch_sharding(mesh))(x)
    np.testing.assert_array_equal(distributed.host_rows(y), 2 * local)
    np.testing.assert_array_equal(distributed.max_over_processes(np.array([pid, -pid])), [1, 0])
    np.testing.assert_array_equal(distributed.sum_over_processes(np.array([pid + 1.0])), [3.0])
    # Objects of different sizes per process come back whole, in process order.
    objs = distributed.allgather_objects({"pid": pid, "ids": list(range(3 + 5 * pid))})
    assert objs == [{"pid": p, "ids": list(range(3 + 5 * p))} for p in range(2)], objs
    distributed.check_rows_split(mesh)
    try:
        distributed.check_rows_split(sharding.make_mesh((1, 1, -1)))  # rows not split at all
        raise AssertionError("no error")
    except ValueError as e:
        assert "config.mesh.shape = (1, 1, 4)" in str(e), e
    distributed.sync("done")
    print("OK", pid, distributed.iterator_state_name())
    print("DONE", pid)
    """
)


@pytest.mark.slow
def test_two_cpu_processes_build_global_arrays_and_agree(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    outs = launch_processes(script, timeout=300)
    for i, out in enumerate(outs):
        assert f"OK {i} process_{i}-of-2.json" in out
