"""Data pipeline: prompt sources and checkpointable grain prompt batches.

  source = TaskSource(rlvr_jax.tasks.get("countdown"), "train", 4096)  # or JsonlSource(path)
  batches = prompt_batches(source, batch_size=32, seed=0, group_size=8)
  batch = next(batches)              # PromptBatch: 32 prompts, G=8
  state = batches.get_state()        # small JSON dict; set_state(state) resumes

In an orbax CheckpointManager the iterator is the item
`IteratorSave(batches)` / `IteratorRestore(fresh_batches)` (grain's handler).
"""

import importlib

# Exports resolve on first use: `rlvr_jax.data.vocab` (the tokenizer) must not pay
# for importing grain and orbax, which the pipeline modules need.
_EXPORTS = {
    "IteratorHandler": "checkpoint",
    "IteratorRestore": "checkpoint",
    "IteratorSave": "checkpoint",
    "restore_iterator_state": "checkpoint",
    "save_iterator_state": "checkpoint",
    "DEFAULT_READ_OPTIONS": "pipeline",
    "PromptBatch": "pipeline",
    "PromptBatchIterator": "pipeline",
    "prompt_batches": "pipeline",
    "RECORD_FIELDS": "sources",
    "JsonlSource": "sources",
    "TaskSource": "sources",
    "metadata_json": "sources",
}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rlvr_jax.data.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rlvr_jax.data' has no attribute {name!r}")


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
