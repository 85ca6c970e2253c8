"""Checkpointing the prompt iterator with orbax, through grain's own handler.

Grain ships an orbax `CheckpointHandler` for its iterators together with the
args pair `CheckpointSave` / `CheckpointRestore` (registered with orbax when
grain is imported). The handler writes the iterator's `get_state()` as JSON to
`process_<i>-of-<n>.json`, one file per JAX process, so every host resumes its
own shard. Use it as one item of the run's `ocp.CheckpointManager`, next to
the train state:

  mngr.save(step, args=ocp.args.Composite(
      state=ocp.args.StandardSave(train_state),
      data=IteratorSave(batches)))
  mngr.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state),
      data=IteratorRestore(fresh_batches)))

The helpers below write the same files outside a CheckpointManager (notebooks,
tools), so both paths read each other's checkpoints.
"""

from __future__ import annotations

import os

import grain.checkpoint
from etils import epath

from rlvr_jax.data.pipeline import PromptBatchIterator

# Orbax args for one iterator item; both route to grain's CheckpointHandler.
IteratorSave = grain.checkpoint.CheckpointSave
IteratorRestore = grain.checkpoint.CheckpointRestore
IteratorHandler = grain.checkpoint.CheckpointHandler


def save_iterator_state(directory: str | os.PathLike, iterator: PromptBatchIterator) -> None:
    """Writes this process's iterator state into `directory` (created if needed).

    Args:
      directory: the checkpoint item directory.
      iterator: the iterator whose position is saved.
    """
    path = epath.Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    IteratorHandler().save(path, args=IteratorSave(iterator))


def restore_iterator_state(
    directory: str | os.PathLike, iterator: PromptBatchIterator
) -> PromptBatchIterator:
    """Moves `iterator` to the position saved in `directory` by this process.

    Args:
      directory: a directory written by `save_iterator_state` or by an
        `IteratorSave` item of an orbax CheckpointManager.
      iterator: a fresh iterator built with the same pipeline settings.

    Returns:
      `iterator`, whose next batch is the one after the saved position.

    Raises:
      ValueError: no state for this process, or a pipeline mismatch.
    """
    return IteratorHandler().restore(epath.Path(directory), args=IteratorRestore(iterator))
