"""Data pipeline: prompt sources and checkpointable grain prompt batches.

  source = TaskSource(rlvr_jax.tasks.get("countdown"), "train", 4096)  # or JsonlSource(path)
  batches = prompt_batches(source, batch_size=32, seed=0, group_size=8)
  batch = next(batches)              # PromptBatch: 32 prompts, G=8
  state = batches.get_state()        # small JSON dict; set_state(state) resumes

In an orbax CheckpointManager the iterator is the item
`IteratorSave(batches)` / `IteratorRestore(fresh_batches)` (grain's handler).
"""

from rlvr_jax.data.checkpoint import (
    IteratorHandler,
    IteratorRestore,
    IteratorSave,
    restore_iterator_state,
    save_iterator_state,
)
from rlvr_jax.data.pipeline import (
    DEFAULT_READ_OPTIONS,
    PromptBatch,
    PromptBatchIterator,
    prompt_batches,
)
from rlvr_jax.data.sources import RECORD_FIELDS, JsonlSource, TaskSource, metadata_json

__all__ = [
    "DEFAULT_READ_OPTIONS",
    "RECORD_FIELDS",
    "IteratorHandler",
    "IteratorRestore",
    "IteratorSave",
    "JsonlSource",
    "PromptBatch",
    "PromptBatchIterator",
    "TaskSource",
    "metadata_json",
    "prompt_batches",
    "restore_iterator_state",
    "save_iterator_state",
]
