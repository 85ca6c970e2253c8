"""Checkpoints of an SFT loop, so that a killed run resumes where it stopped.

An SFT run's batch order is a function of (seed, step) (`sft._batch_indices`),
so its train state (params, optimizer state, step) plus the loss history is all
a resume needs. One directory holds the newest checkpoint only (orbax: written
under a temporary name and renamed, so a kill mid-save leaves the previous one;
leftover temporary directories are removed when the directory is next opened).
The run's identity (steps, batch size, seed, lr, number of examples) is saved
with it; resuming with another one is refused.

This is the SFT's own small checkpointer, not `rlvr_jax.run`'s: `train` sits
below `run` in the package layering.
"""

from __future__ import annotations

import os
from typing import Any

import orbax.checkpoint as ocp
from etils import epath


class SFTCheckpointer:
    """The newest checkpoint of one SFT run in `directory`."""

    def __init__(self, directory: str | os.PathLike, identity: dict[str, Any]):
        """Opens (creating if needed) the directory.

        Args:
          directory: where the checkpoint lives (local path or URL).
          identity: what makes two runs the same run (JSON values); a checkpoint
            saved with another identity is refused by `restore`.
        """
        path = os.fspath(directory)
        self.directory = epath.Path(path if "://" in path else os.path.abspath(path))
        self.identity = dict(identity)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=1, create=True, cleanup_tmp_directories=True
        )
        handlers = dict(state=ocp.StandardCheckpointHandler(), meta=ocp.JsonCheckpointHandler())
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=handlers
        )

    def latest_step(self) -> int | None:
        """The step of the saved checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Saves the train state and `meta` (JSON: history, ...) as `step`; waits for it."""
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            meta=ocp.args.JsonSave({"identity": self.identity, **meta}),
        )
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

    def restore(self, like: Any) -> tuple[Any, dict[str, Any]]:
        """(state, meta) of the newest checkpoint, in the structure of `like`.

        Raises:
          ValueError: the checkpoint belongs to another run (its identity differs).
        """
        step = self._manager.latest_step()
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = dict(meta["meta"])
        saved = meta.pop("identity", None)
        if saved != self.identity:
            raise ValueError(
                f"{self.directory} holds the SFT checkpoint of another run ({saved}, not "
                f"{self.identity}); remove it or use another checkpoint directory"
            )
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(like))
        )
        return restored["state"], meta

    def close(self) -> None:
        self._manager.close()
