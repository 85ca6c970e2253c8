"""What a pipeline stage kind is, what its runner gets, and the helpers the kinds share.

A kind (`Kind`) is its default run config, its checks, how it points the run at
its start checkpoint, its CI pulse and its runner; `pipeline.stages` holds the
kinds. Everything here is below every kind module (`rl_stage`, `dpo`, `sft`,
`merge`) and imports none of them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import ml_collections
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.rl.config import default_config
from rlvr_jax.train.warmstart import TASK_OPTIONS


@dataclasses.dataclass
class StageContext:
    """What a stage runner gets.

    Attributes:
      name, kind: the stage's name and kind.
      config: its run config, resolved (start checkpoint, task options, stage refs).
      switch: its `switch` fields (metric, delta, patience).
      workdir: its directory.
      init_dir: the HF checkpoint directory it starts from.
      exports: "base" and every earlier stage -> its export directory.
      base: the pipeline's base `model` fields (domain, source, ...).
      allow_config_change: run-config fields a resume of this stage may change.
    """

    name: str
    kind: str
    config: ml_collections.ConfigDict
    switch: ml_collections.ConfigDict
    workdir: Path
    init_dir: str
    exports: dict[str, str]
    base: ml_collections.ConfigDict
    allow_config_change: tuple[str, ...] = ()

    @property
    def export_dir(self) -> Path:
        return self.workdir / "export"


@dataclasses.dataclass(frozen=True)
class Kind:
    """A stage kind: its default run config, its checks, how it resolves and runs.

    Attributes:
      defaults: () -> the kind's default run config (locked).
      run: (StageContext) -> result dict (final metrics; {"preempted": True, ...}
        when a signal stopped it before the end).
      check: (run config, where, earlier stage names) -> None; ValueError naming
        `where`.<field>.
      resolve: (run config copy, init_dir, base model fields) -> None: points the
        run at its start checkpoint (in place).
      pulse: (run config) -> None: shrinks it to a seconds-long CI run (in place).
      switchable: whether `switch` applies (the kind evaluates in-run).
    """

    defaults: Callable[[], ml_collections.ConfigDict]
    run: Callable[[StageContext], dict[str, Any]]
    check: Callable[..., None]
    resolve: Callable[..., None]
    pulse: Callable[[ml_collections.ConfigDict], None]
    switchable: bool = False


def rl_defaults() -> ml_collections.ConfigDict:
    """The RL config defaults, without in-run evaluations: the pipeline evaluates each export.

    (A stage with a switch needs them back: eval.every > 0, and eval.at_start for
    the score before training.)
    """
    c = default_config()
    c.eval.at_start = False
    c.eval.every = 0
    return c


def task_options(name: str, options: str, base) -> str:
    """A stage's task options: as given, else the base's warm-start options for its domain."""
    if options or base.source != "warm_start" or name != base.domain:
        return options
    return json.dumps(TASK_OPTIONS.get(base.domain, {}), sort_keys=True)


SPREAD_RULES = "fsdp"  # the sharding rules of `spread` (a preset of rlvr_jax.sharding)


def spread(model):
    """In a multi-process run, shards `model` over every device of every process (fsdp).

    The SFT stage and the evaluation (which are not RL configs with a
    `mesh` of their own) run on this mesh, so the sampler and the updates are
    SPMD programs over all hosts. A single-process run leaves the model as loaded.

    Returns:
      The mesh (None in a single-process run).
    """
    if jax.process_count() == 1:
        return None
    mesh = sharding.make_mesh((1, -1, 1), jax.devices())
    nnx.update(model, sharding.shard_state(nnx.state(model), mesh, SPREAD_RULES))
    return mesh
