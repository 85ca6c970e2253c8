"""Multi-host runs: process start-up, host-local ↔ global arrays, cross-host agreement.

A multi-host run (a TPU pod slice, several GPU hosts) starts the same command in
one process per host. Each process must call `initialize()` before any other JAX
call; afterwards `jax.devices()` lists every host's devices, a mesh spans them all,
and jitted programs run as one SPMD program. Each process feeds only its own rows
(`host_local_to_global`), keeps its own prompt-iterator position
(`iterator_state_name`), and decisions that change control flow, such as stopping
on a preemption signal that reached only some hosts, are agreed on (`agree`).

How `initialize` finds its peers, first match wins:
  1. arguments (the `--coordinator_address`, `--num_processes`, `--process_id` flags
     of `rlvr_jax.main`);
  2. environment variables RLVR_COORDINATOR_ADDRESS, RLVR_NUM_PROCESSES,
     RLVR_PROCESS_ID (all three, or none);
  3. `auto=True` (`--distributed`, or RLVR_DISTRIBUTED=1): `jax.distributed.initialize()`
     with no arguments, which discovers everything on Cloud TPU pods, SLURM and
     Open MPI;
  4. otherwise a single-process run: nothing to do.

Every function is a cheap no-op (or the identity) in a single-process run.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)

ENV_COORDINATOR = "RLVR_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "RLVR_NUM_PROCESSES"
ENV_PROCESS_ID = "RLVR_PROCESS_ID"
ENV_AUTO = "RLVR_DISTRIBUTED"


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    auto: bool = False,
    env: Mapping[str, str] | None = None,
) -> bool:
    """Starts JAX's distributed runtime when this is one process of several.

    Call it once, first thing, in every process (before anything creates a JAX
    array); calling it again after a successful start does nothing.

    Args:
      coordinator_address: "host:port" of process 0's coordinator service.
      num_processes: processes in the run; 1 (or nothing set) means single-process.
      process_id: this process's index in [0, num_processes).
      auto: with nothing given explicitly, call `jax.distributed.initialize()`
        without arguments (cluster auto-detection: Cloud TPU pods, SLURM, Open MPI).
      env: where to read the RLVR_* fallbacks (default `os.environ`).
    Returns:
      True if the distributed runtime was started (or already running), False for
      a single-process run.
    Raises:
      ValueError: only some of the three explicit settings are given, or they are
        inconsistent (the message names the flags and environment variables).
    """
    env = os.environ if env is None else env
    if jax.distributed.is_initialized():
        return True
    coordinator_address = coordinator_address or env.get(ENV_COORDINATOR, "").strip() or None
    if num_processes is None:
        num_processes = _env_int(env, ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(env, ENV_PROCESS_ID)
    auto = auto or env.get(ENV_AUTO, "").strip().lower() in ("1", "true", "yes")
    given = {
        f"coordinator_address ({ENV_COORDINATOR})": coordinator_address,
        f"num_processes ({ENV_NUM_PROCESSES})": num_processes,
        f"process_id ({ENV_PROCESS_ID})": process_id,
    }
    if num_processes == 1:
        if process_id not in (None, 0):
            raise ValueError(f"process_id = {process_id} with num_processes = 1; must be 0")
        return False
    if all(v is None for v in given.values()):
        if not auto:
            return False
        log.info("jax.distributed.initialize() with cluster auto-detection")
        jax.distributed.initialize()
        return True
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise ValueError(
            f"a multi-process run needs all of coordinator_address, num_processes and "
            f"process_id; missing: {', '.join(missing)}"
        )
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(
            f"need num_processes >= 1 and 0 <= process_id < num_processes, got "
            f"num_processes = {num_processes}, process_id = {process_id}"
        )
    log.info(
        "jax.distributed.initialize(%s, num_processes=%d, process_id=%d)",
        coordinator_address,
        num_processes,
        process_id,
    )
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
    )
    return True


def is_logging_process() -> bool:
    """True in the one process that writes logs, metrics and other non-orbax files (0)."""
    return jax.process_index() == 0


def iterator_state_name(process_index: int | None = None, process_count: int | None = None):
    """The file name of one process's data-iterator state: "process_<i>-of-<n>.json".

    The same naming as grain's orbax iterator handler, so each host resumes its own
    shard of the prompts and a run restarted with another process count finds no
    file (instead of silently reading another host's position).

    Args:
      process_index, process_count: default to this process's.
    Returns:
      The file name (no directory).
    """
    i = jax.process_index() if process_index is None else process_index
    n = jax.process_count() if process_count is None else process_count
    return f"process_{i}-of-{n}.json"


def host_local_to_global(batch, mesh: jax.sharding.Mesh, sharding=None):
    """A global sharded batch from each process's own rows.

    Every process passes its local rows (the same shapes on every process);
    the result's leading dim is the concatenation over processes in process
    order, and each device holds its rows without any cross-host copy.

    Args:
      batch: pytree of host arrays, rows first (e.g. {"tokens_BxT": [b, T]}).
      mesh: the device mesh (spanning every process's devices).
      sharding: a Sharding, or a pytree of them matching `batch`; default rows
        over the batch axes (data, fsdp), other dims whole.
    Returns:
      The same pytree of global `jax.Array`s with `process_count() * b` rows.
    """
    from rlvr_jax import sharding as sharding_lib  # lazy: it imports flax

    if sharding is None:
        sharding = sharding_lib.batch_sharding(mesh)
    if isinstance(sharding, jax.sharding.Sharding):
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), batch
        )
    return jax.tree.map(
        lambda x, s: jax.make_array_from_process_local_data(s, np.asarray(x)), batch, sharding
    )


def on_host_rows(fn, mesh: jax.sharding.Mesh):
    """`fn(params, rest, tokens_BxT, mask_BxT)` taking and returning this process's rows.

    The host rows become one global batch (every process's rows, concatenated);
    the [B, T] result comes back as this process's rows, in NumPy. (A scorer of a
    policy, critic or teacher sharded over `mesh`.)
    """

    def call(params, rest, tokens_BxT, mask_BxT):
        rows = host_local_to_global((tokens_BxT, mask_BxT), mesh)
        return host_rows(fn(params, rest, *rows))

    return call


def to_host(tree):
    """Host numpy copies of (possibly cross-host) global arrays, whole on every process.

    Arrays whose shards all live in this process (every single-process array)
    are fetched directly; others are all-gathered across processes first.

    Args:
      tree: pytree of jax.Array (or numpy) leaves.
    Returns:
      The same pytree of numpy arrays with the global shapes.
    """

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(one, tree)


def agree(flag: bool) -> bool:
    """True on every process if `flag` is True on any (e.g. SIGTERM reached some hosts).

    A collective: every process must call it at the same point of the loop.

    Args:
      flag: this process's value.
    Returns:
      The logical OR over all processes (`flag` itself in a single-process run).
    """
    if jax.process_count() == 1:
        return bool(flag)

    flags = multihost_utils.process_allgather(np.asarray([bool(flag)], np.int32))
    return bool(np.asarray(flags).any())


def everyone(flag: bool) -> bool:
    """True on every process if `flag` is True on all of them (a collective, as `agree`).

    E.g. a cache or a done-marker is used only when every host sees it.
    """
    return not agree(not flag)


def sync(name: str) -> None:
    """Blocks until every process reaches the barrier `name` (no-op single-process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def host_rows(x) -> np.ndarray:
    """This process's rows of a global array split on its leading dim, as NumPy.

    The inverse of `host_local_to_global` for arrays laid out like its result
    (rows over the batch axes, other dims whole): the rows this process's devices
    hold, in global order. A fully addressable array (every single-process one)
    comes back whole.

    Args:
      x: a jax.Array (or NumPy array).
    Returns:
      NumPy array of the local rows (all rows when fully addressable).
    Raises:
      ValueError: a shard splits a dim other than the first.
    """
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    blocks: dict[int, np.ndarray] = {}
    for shard in x.addressable_shards:
        rows, *rest = shard.index
        whole = [
            (d.start or 0, n if d.stop is None else d.stop) == (0, n)
            for d, n in zip(rest, x.shape[1:], strict=True)
        ]
        if not all(whole):
            raise ValueError(
                f"host_rows: shard {shard.index} of shape {x.shape} splits a non-row dim"
            )
        blocks.setdefault(rows.start or 0, np.asarray(shard.data))  # replicas: keep one
    return np.concatenate([blocks[k] for k in sorted(blocks)])


def _allgather(values) -> np.ndarray:
    """[process_count, ...]: every process's `values` (a small host array)."""
    return np.asarray(multihost_utils.process_allgather(np.asarray(values)))


def sum_over_processes(values) -> np.ndarray:
    """The elementwise sum of a small host array over processes (a collective).

    Args:
      values: NumPy array (same shape and dtype on every process).
    Returns:
      The sum (`values` itself, as an array, in a single-process run).
    """
    values = np.asarray(values)
    return values if jax.process_count() == 1 else _allgather(values).sum(0)


def allgather_objects(obj) -> list:
    """Every process's `obj` (any picklable host value), in process order (a collective).

    Pickled to bytes, padded to the longest process's length and all-gathered as
    uint8, so processes may send objects of different sizes (per-prompt results).

    Args:
      obj: this process's value.
    Returns:
      [obj of process 0, obj of process 1, ...] (`[obj]` in a single-process run).
    """
    if jax.process_count() == 1:
        return [obj]

    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = _allgather(np.array([data.size], np.int64))[:, 0]  # one gather gives max and cuts
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    blobs = _allgather(padded)
    return [pickle.loads(b[:n].tobytes()) for n, b in zip(sizes.tolist(), blobs, strict=True)]


def process_shard(num_items: int, index: int, processes: int) -> list[int]:
    """Item indices process `index` handles: every `processes`-th from `index`.

    Every process gets the same count (ceil(N / P)), so they make equally many
    sampler calls (collectives); a process short of one repeats its first item
    (or item 0), a padding entry whose results the caller drops (`gather_shards`).
    """
    mine = list(range(index, num_items, processes))
    per = -(-num_items // processes)
    return mine + [mine[0] if mine else 0] * (per - len(mine))


def my_shard(num_items: int, split: bool = True) -> list[int]:
    """This process's `process_shard` of `num_items` (all of them unless `split`)."""
    n = jax.process_count() if split else 1
    return process_shard(num_items, jax.process_index() if n > 1 else 0, n)


def gather_shards(ids: list[int], results: list, num_items: int, split: bool = True) -> list:
    """Per-item results of every process's shard, in item order (a collective if `split`).

    Args:
      ids: this process's item indices (`my_shard`), padding repeats included.
      results: this process's result per entry of `ids`.
      num_items: N; every item must be in some process's shard.
      split: whether the items were split over processes (else `results` are all).
    Returns:
      [result of item 0, ..., result of item N - 1] (a padding entry's is dropped).
    """
    by_item: dict[int, Any] = {}
    for i, r in zip(ids, results, strict=True):
        by_item.setdefault(int(i), r)
    if split and jax.process_count() > 1:
        for part in allgather_objects(by_item):
            by_item.update(part)
    return [by_item[i] for i in range(num_items)]


def max_over_processes(values) -> np.ndarray:
    """The elementwise maximum of a small host array over processes (a collective).

    Shapes that must agree (rows to pad to, a sequence bucket) take the largest
    value any process needs.

    Args:
      values: NumPy array (same shape and dtype on every process).
    Returns:
      The maximum (`values` itself, as an array, in a single-process run).
    """
    values = np.asarray(values)
    return values if jax.process_count() == 1 else _allgather(values).max(0)


def check_rows_split(mesh: jax.sharding.Mesh, what: str = "config.mesh.shape") -> None:
    """Raises unless batch rows over `mesh` give each process its own equal block.

    Feeding host-local rows (`host_local_to_global`) needs every process's devices
    to hold a distinct 1/process_count of the rows: the batch axes (data, fsdp)
    must split at least as many ways as there are processes, along process lines.

    Args:
      mesh: the device mesh.
      what: the config field named in the error.
    """
    from rlvr_jax import sharding as sharding_lib  # lazy: it imports flax

    n = jax.process_count()
    rows = n * sharding_lib.batch_shards(mesh)
    index = sharding_lib.batch_sharding(mesh).devices_indices_map((rows,))
    owners: dict[tuple, set[int]] = {}
    for device, (s,) in index.items():
        owners.setdefault((s.start or 0, s.stop or rows), set()).add(device.process_index)
    per_process = [sum(hi - lo for (lo, hi), p in owners.items() if i in p) for i in range(n)]
    if any(len(p) > 1 for p in owners.values()) or len(set(per_process)) > 1:
        raise ValueError(
            f"{what} = {tuple(mesh.devices.shape)}: batch rows over (data, fsdp) do not give "
            f"each of the {n} processes its own block of rows (rows per process: "
            f"{per_process}); put at least {n} ways of data x fsdp across hosts"
        )
