"""Run checkpoints (orbax) and preemption handling for the trainers.

One run keeps its checkpoints in `<workdir>/checkpoints/<step>/`, each step with
three orbax items written together by one `CheckpointManager.save`:

  state/  the train state pytree (params, optimizer state, step, PRNG key, ...)
  data/   the prompt iterator's `get_state()` (JSON), or null
  meta/   a JSON dict (config, metrics, anything the run wants back)

Atomicity comes from orbax: a step is written under a temporary name and renamed
(or, on object stores, marked with a commit file) only once every item is
complete, so a crash mid-save never leaves a step that `latest_step` or
`restore` would pick up. Leftover temporary directories are removed when the
next run opens the directory.

Multi-host: every process calls `save` and `restore` (orbax writes each process's
array shards and has the primary process write the JSON items and metadata);
this module writes nothing to disk itself.

  ckpt = RunCheckpointer(workdir / "checkpoints", keep=3)
  if ckpt.latest_step() is not None:
      state, data_state, meta = ckpt.restore(jax.eval_shape(init_state))
  with PreemptionGuard() as guard:
      for ...:
          state = train_step(state, ...)
          if step % every == 0 or guard.requested:
              ckpt.save(step, state, data_state=batches.get_state(), meta=meta)
          if guard.requested:
              break
  ckpt.close()
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath


class CheckpointMismatch(ValueError):
    """A checkpoint holds another train state (other leaves or shapes) than the one given."""


class RunCheckpointer:
    """Orbax checkpoints of one run in <workdir>/checkpoints.

    Each step holds the train state, the data iterator state and metadata.
    """

    def __init__(self, directory: str | os.PathLike, *, keep: int = 3, async_save: bool = False):
        """Opens (creating if needed) the checkpoint directory of a run.

        Args:
          directory: where the step directories live, e.g. `<workdir>/checkpoints`;
            local paths are made absolute, `gs://...` paths are kept as they are.
          keep: how many of the most recent steps to keep (older ones are deleted
            after each save).
          async_save: if True, `save` returns once the arrays are copied to host
            memory and the files are written in the background; call `wait()`
            before reading the files from another process.
        """
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        path = os.fspath(directory)
        self.directory = epath.Path(path if "://" in path else os.path.abspath(path))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=async_save,
            create=True,
            # Temporary directories left by a crash mid-save are never restored
            # from; removing them on open keeps the directory tidy.
            cleanup_tmp_directories=True,
        )
        # Handlers named up front: a manager opened on an existing run can then
        # read the items' metadata before the first save or restore.
        handlers = dict(
            state=ocp.StandardCheckpointHandler(),
            data=ocp.JsonCheckpointHandler(),
            meta=ocp.JsonCheckpointHandler(),
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=handlers
        )

    def latest_step(self) -> int | None:
        """The newest complete step, or None if there is none.

        Returns:
          The step number (unfinished saves of a crashed run are not counted).
        """
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """All complete steps on disk, ascending.

        Returns:
          The step numbers.
        """
        return sorted(self._manager.all_steps())

    def save(
        self,
        step: int,
        state: Any,
        *,
        data_state: dict | None = None,
        meta: dict | None = None,
        force: bool = False,
    ) -> bool:
        """Saves the train state, the data iterator state and metadata as one step.

        Args:
          step: the step number (directory name); must be newer than the latest
            saved step unless `force`.
          state: a pytree of jax arrays (the train state).
          data_state: the prompt iterator's `get_state()`; JSON-serialisable.
          meta: a JSON dict (config, metrics); numpy/jax scalars and arrays are
            converted to numbers and lists.
          force: save even if orbax's policy would skip this step (a step older
            than the latest one); a step already on disk is never overwritten.
        Returns:
          True if a checkpoint was written (started, with `async_save`), False if
          it was skipped (the step already exists, or is older and not forced).
        """
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict or None, got {type(meta).__name__}")
        data_json = _to_json(data_state, "data_state")
        meta_json = _to_json(meta or {}, "meta")
        if step in self._manager.all_steps():
            return False
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_json),
            meta=ocp.args.JsonSave(meta_json),
        )
        return bool(self._manager.save(step, args=args, force=force))

    def restore(
        self, abstract_state: Any, step: int | None = None
    ) -> tuple[Any, dict | None, dict]:
        """Restores a step onto the structure, dtypes and shardings of `abstract_state`.

        Args:
          abstract_state: the train state from `jax.eval_shape` (ShapeDtypeStruct
            leaves, optionally with `.sharding`) or a concrete state. Arrays are
            restored with each leaf's sharding (so a sharded run restores
            sharded); leaves without one go to the default device (replicated
            over all devices when there are several processes). Dtypes may
            differ from the saved ones (values are cast); shapes may not.
          step: the step to restore; the latest by default.
        Returns:
          (state, data_state, meta): the state with `abstract_state`'s pytree
          structure, the saved data iterator state (None if none was saved) and
          the saved meta dict.
        Raises:
          FileNotFoundError: no complete checkpoint in the directory, or no such step.
          CheckpointMismatch (a ValueError): the saved state's structure or shapes
            differ from `abstract_state` (the message names the first differing
            key path).
        """
        self._manager.wait_until_finished()
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        if step is None:
            step = steps[-1]
        elif step not in steps:
            raise FileNotFoundError(
                f"no checkpoint for step {step} in {self.directory}; saved steps: {steps}"
            )
        target = jax.tree.map(_abstract_leaf, abstract_state)
        saved = self._manager.item_metadata(step)["state"]
        _check_structure(saved.tree, target, f"{self.directory}/{step}")
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target),
                data=ocp.args.JsonRestore(),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return restored["state"], restored["data"], restored["meta"] or {}

    def reload(self) -> None:
        """Re-reads the step list from disk (after a step directory was moved away)."""
        self._manager.reload()

    def wait(self) -> None:
        """Blocks until background (async) saves have finished."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases orbax's resources."""
        self._manager.close()

    def __enter__(self) -> RunCheckpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PreemptionGuard:
    """Catches SIGTERM (pod preemption; optionally SIGINT) as a flag while active.

    A context manager: installs handlers that only set a flag and restores the
    previous handlers on exit. The trainer checks `guard.requested` after each
    step, saves a checkpoint and exits cleanly. Handlers can only be installed
    from the main thread.

    On several hosts, a signal may reach only some processes: agree before
    saving (e.g. an all-gather of `requested`) so every process saves the same step.
    """

    def __init__(self, signals=(signal.SIGTERM,)):
        """Prepares the guard; handlers are installed on `__enter__`.

        Args:
          signals: the signals to catch, e.g. `(signal.SIGTERM, signal.SIGINT)`.
        """
        self._signals = tuple(signal.Signals(s) for s in signals)
        if not self._signals:
            raise ValueError("PreemptionGuard needs at least one signal")
        self._previous: dict[signal.Signals, Any] = {}
        self._signal_name: str | None = None

    @property
    def requested(self) -> bool:
        """True once one of the signals has arrived."""
        return self._signal_name is not None

    @property
    def signal_name(self) -> str | None:
        """The name of the first signal received ("SIGTERM"), or None."""
        return self._signal_name

    def _handle(self, signum, frame) -> None:
        # Only record: saving from inside a signal handler could interrupt a
        # train step or an orbax write halfway.
        del frame
        if self._signal_name is None:
            self._signal_name = signal.Signals(signum).name

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("PreemptionGuard must be entered from the main thread")
        if self._previous:
            raise RuntimeError("PreemptionGuard is already active")
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            # None: the previous handler was not installed from Python.
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}


def _to_json(value: Any, name: str) -> Any:
    """`value` as plain JSON types (numpy/jax scalars and arrays become numbers/lists)."""

    def default(x):
        if isinstance(x, (np.ndarray, np.generic, jax.Array)):
            return np.asarray(x).tolist()
        raise TypeError(f"{name} is not JSON-serialisable: a {type(x).__name__} value ({x!r:.80})")

    return json.loads(json.dumps(value, default=default))


def _default_sharding() -> jax.sharding.Sharding:
    # What jax itself does with an unplaced array: the first device. With several
    # processes an array must span all of them, so replicate.
    if jax.process_count() == 1:
        return jax.sharding.SingleDeviceSharding(jax.devices()[0])
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def _abstract_leaf(x: Any) -> Any:
    """A ShapeDtypeStruct with a sharding for every array-like leaf."""
    if isinstance(x, jax.ShapeDtypeStruct):
        if x.sharding is not None:
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=_default_sharding())
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, (np.ndarray, np.generic)):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=_default_sharding())
    return x


def _key_name(key: Any) -> str:
    # The saved tree is nested dicts/lists of strings and indices; map jax's key
    # kinds (dict key, attribute, sequence index) onto the same names.
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _flat_paths(tree: Any) -> dict[tuple[str, ...], Any]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {tuple(_key_name(k) for k in path): leaf for path, leaf in leaves}


def _check_structure(saved_tree: Any, target: Any, where: str) -> None:
    """Raises CheckpointMismatch naming the first key path where leaves or shapes differ."""
    saved = _flat_paths(saved_tree)
    wanted = _flat_paths(target)
    for path, leaf in wanted.items():
        name = "/".join(path)
        if path not in saved:
            extra = sorted(set(saved) - set(wanted))
            hint = f"; the checkpoint has instead e.g. {'/'.join(extra[0])}" if extra else ""
            raise CheckpointMismatch(
                f"checkpoint {where} does not match the train state: no saved value for "
                f"{name}{hint}"
            )
        saved_shape, shape = getattr(saved[path], "shape", None), getattr(leaf, "shape", None)
        if saved_shape is not None and shape is not None and tuple(saved_shape) != tuple(shape):
            raise CheckpointMismatch(
                f"checkpoint {where} does not match the train state: {name} has shape "
                f"{tuple(saved_shape)} in the checkpoint, {tuple(shape)} in the train state"
            )
    for path in saved:
        if path not in wanted:
            raise CheckpointMismatch(
                f"checkpoint {where} does not match the train state: the checkpoint has "
                f"{'/'.join(path)}, which the train state lacks"
            )
