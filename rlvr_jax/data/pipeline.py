"""Prompt batches from a random-access source: shard, shuffle per epoch, repeat, batch.

The pipeline is a grain `MapDataset` chain turned into one iterator:

  source -> [shard_index::shard_count] -> shuffle(seed) -> repeat(num_epochs)
         -> tag epoch -> batch(batch_size) -> to_iter_dataset (prefetch threads)

Order of operations, and why:
  * Sharding is a static strided slice of the source, before shuffling: each
    host owns the same prompts in every epoch, shards are disjoint, cover the
    source, and differ in size by at most one.
  * Shuffling is grain's index shuffle: a permutation computed per index, so
    random access (and therefore resume) costs nothing. Grain reseeds it per
    epoch (seed + epoch), so every epoch has a fresh order.
  * Batches are cut from the concatenated stream of epochs, so a batch may
    straddle an epoch boundary and no prompt is ever dropped at an epoch end;
    each prompt's `epoch_B` says which pass it belongs to.

The iterator's state is grain's own (`{"next_index": batches consumed}`), wrapped
with the pipeline's settings so a state restored into a differently built
pipeline fails loudly instead of silently yielding other batches. It is a small
JSON dict, which grain's orbax handler (`rlvr_jax.data.checkpoint`) writes
per process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from rlvr_jax.data.sources import RECORD_FIELDS
from rlvr_jax.tasks.base import Problem

# Few threads and a short buffer: task generation is Python (GIL-bound), so more
# threads only steal CPU from the trainer; two batches ahead hide the latency.
DEFAULT_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)


@dataclasses.dataclass(frozen=True, eq=False)
class PromptBatch:
    """B prompts for one RL step; the sampler draws `group_size` rollouts from each.

    Attributes:
      index_B: int64[B], each prompt's position in its source.
      epoch_B: int64[B], the pass over this host's shard the prompt comes from.
      ids, prompts, answers, solutions: B strings each (record fields).
      metadata: B JSON object strings.
      group_size: G, rollouts per prompt (GRPO's group size). Pipeline metadata
        only: batching is per prompt, and B * G rollouts are generated later.
    """

    index_B: np.ndarray
    epoch_B: np.ndarray
    ids: tuple[str, ...]
    prompts: tuple[str, ...]
    answers: tuple[str, ...]
    solutions: tuple[str, ...]
    metadata: tuple[str, ...]
    group_size: int

    def __len__(self) -> int:
        return len(self.ids)

    def problems(self) -> list[Problem]:
        """The batch as task Problems (for `Task.verify`); metadata is JSON-decoded.

        Returns:
          B Problems. JSON has no tuples, so tuple metadata comes back as lists.
        """
        return [
            Problem(id=i, prompt=p, answer=a, solution=s, metadata=json.loads(m))
            for i, p, a, s, m in zip(
                self.ids, self.prompts, self.answers, self.solutions, self.metadata, strict=True
            )
        ]

    def rollout_groups(self) -> np.ndarray:
        """int32[B*G]: the prompt row of each rollout, a group's G rollouts contiguous.

        Returns:
          The `group_B` field of the rollout batch built from this prompt batch.
        """
        return np.repeat(np.arange(len(self), dtype=np.int32), self.group_size)


class PromptBatchIterator(grain.DatasetIterator):
    """Iterator of PromptBatch with checkpointable state.

    A grain `DatasetIterator`, so grain's orbax `CheckpointHandler` saves it as
    JSON and `start_prefetch` works after a restore.

    Attributes:
      spec: the pipeline settings a saved state must match to be restored.
    """

    def __init__(self, parent: grain.DatasetIterator, spec: dict[str, Any]):
        super().__init__(parent)
        self.spec = spec

    def __next__(self) -> PromptBatch:
        return next(self._parent)

    def get_state(self) -> dict[str, Any]:
        """The position after the last batch returned.

        Returns:
          A JSON-serialisable dict: grain's iterator state plus the pipeline spec.
        """
        return {"grain": self._parent.get_state(), "pipeline": dict(self.spec)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from `state`: the next batch is the one after the saved position.

        Args:
          state: a dict from `get_state` (possibly JSON round-tripped) of a
            pipeline built with the same source size and settings.

        Raises:
          ValueError: the state is not a prompt pipeline state, or was saved
            by a pipeline with other settings (the message lists them).
        """
        if not isinstance(state, dict) or set(state) != {"grain", "pipeline"}:
            raise ValueError(f"not a prompt_batches iterator state: {state!r}")
        saved = state["pipeline"]
        if saved != self.spec:
            keys = sorted(set(saved) | set(self.spec))
            diff = {
                k: (saved.get(k), self.spec.get(k))
                for k in keys
                if saved.get(k) != self.spec.get(k)
            }
            raise ValueError(
                f"iterator state was saved by a different pipeline; (saved, current): {diff}"
            )
        self._parent.set_state(state["grain"])


def prompt_batches(
    source: Sequence[dict[str, Any]],
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
    shard_index: int | None = None,
    shard_count: int | None = None,
    group_size: int = 1,
    drop_remainder: bool = True,
    read_options: grain.ReadOptions | None = None,
) -> PromptBatchIterator:
    """An iterator of prompt batches over this host's shard of `source`.

    Args:
      source: a random-access source of records with the keys of RECORD_FIELDS
        (`TaskSource`, `JsonlSource`, or a list of such dicts).
      batch_size: B, prompts per batch (per host).
      seed: shuffle seed, >= 0. Equal seeds give equal batches on every run.
      shuffle: False keeps source order (still sharded and repeated).
      num_epochs: passes over the shard; None repeats forever.
      shard_index: this host's shard; defaults to `jax.process_index()`.
      shard_count: number of shards; defaults to `jax.process_count()`. Give
        both or neither. Shard i holds source positions i, i + count, ...;
        shard sizes differ by at most one, so with finite `num_epochs` hosts
        may yield different numbers of batches: multi-host runs should use
        num_epochs=None and stop by step count.
      group_size: G, rollouts the sampler will draw per prompt; carried on
        every batch, it does not change which prompts are batched.
      drop_remainder: with finite `num_epochs`, whether the final partial batch
        is dropped (True keeps every batch exactly B prompts, so jitted shapes
        never change). Batches run across epoch boundaries, so this is the
        only batch that can be partial; with num_epochs=None it never occurs.
      read_options: grain prefetch threads and buffer (in batches);
        DEFAULT_READ_OPTIONS when None.

    Returns:
      A PromptBatchIterator of PromptBatch (see `PromptBatchIterator.get_state`).

    Raises:
      ValueError: invalid sizes, seed or shard, an empty shard, or (with
        drop_remainder) fewer prompts in all epochs than one batch.
    """
    if batch_size <= 0 or group_size <= 0:
        raise ValueError(
            f"batch_size and group_size must be positive, got {batch_size}, {group_size}"
        )
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be a non-negative 64-bit integer, got {seed}")
    if num_epochs is not None and num_epochs <= 0:
        raise ValueError(f"num_epochs must be positive or None, got {num_epochs}")
    shard_index, shard_count = _resolve_shard(shard_index, shard_count)

    ds = grain.MapDataset.source(source)[shard_index::shard_count]
    shard_size = len(ds)
    if shard_size == 0:
        raise ValueError(
            f"shard {shard_index}/{shard_count} of a {len(source)}-record source is empty"
        )
    if num_epochs is not None and drop_remainder and shard_size * num_epochs < batch_size:
        raise ValueError(
            f"{num_epochs} epoch(s) of a {shard_size}-prompt shard fill no batch of {batch_size}"
        )
    if shuffle:
        ds = ds.shuffle(seed=_grain_seed(seed))
    ds = ds.repeat(num_epochs)
    ds = ds.map_with_index(functools.partial(_tag_epoch, shard_size=shard_size))
    ds = ds.batch(
        batch_size,
        drop_remainder=drop_remainder,
        batch_fn=functools.partial(_collate, group_size=group_size),
    )
    spec = {
        "source_size": len(source),
        "batch_size": int(batch_size),
        "seed": int(seed),
        "shuffle": bool(shuffle),
        "num_epochs": None if num_epochs is None else int(num_epochs),
        "shard_index": shard_index,
        "shard_count": shard_count,
        "drop_remainder": bool(drop_remainder),
    }
    parent = ds.to_iter_dataset(read_options or DEFAULT_READ_OPTIONS).__iter__()
    return PromptBatchIterator(parent, spec)


def _resolve_shard(shard_index: int | None, shard_count: int | None) -> tuple[int, int]:
    """(index, count) of this host's shard; defaults to the JAX process."""
    if (shard_index is None) != (shard_count is None):
        raise ValueError("give both shard_index and shard_count, or neither")
    if shard_index is None:
        import jax  # only when the caller leaves sharding to the runtime

        shard_index, shard_count = jax.process_index(), jax.process_count()
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"need 0 <= shard_index < shard_count, got {shard_index}, {shard_count}")
    return int(shard_index), int(shard_count)


def _grain_seed(seed: int) -> int:
    """A 32-bit shuffle seed for grain, decorrelated from neighbouring user seeds.

    Grain shuffles epoch e with seed + e, so passing user seeds through would
    make run seed=1's first epoch equal run seed=0's second one.
    """
    return int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])


def _tag_epoch(position: int, record: dict[str, Any], *, shard_size: int) -> dict[str, Any]:
    """Adds the epoch of stream `position` to a copy of `record`."""
    return {**record, "epoch": position // shard_size}


def _collate(records: Sequence[dict[str, Any]], *, group_size: int) -> PromptBatch:
    """Stacks records into a PromptBatch."""
    missing = set(RECORD_FIELDS) - set(records[0])
    if missing:
        raise ValueError(f"source records lack fields {sorted(missing)}; need {RECORD_FIELDS}")
    return PromptBatch(
        index_B=np.array([r["index"] for r in records], np.int64),
        epoch_B=np.array([r["epoch"] for r in records], np.int64),
        ids=tuple(r["id"] for r in records),
        prompts=tuple(r["prompt"] for r in records),
        answers=tuple(r["answer"] for r in records),
        solutions=tuple(r["solution"] for r in records),
        metadata=tuple(r["metadata"] for r in records),
        group_size=group_size,
    )
