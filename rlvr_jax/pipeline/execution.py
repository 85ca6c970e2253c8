"""Mesh and precision of pipeline stages: the SFT stage's optional blocks, and one for all.

RL-kind stages (rl, opd, dpo) have an RL config's `mesh` (shape, rules) and
`model` execution fields (param_dtype, dtype, attention, attention_block,
scan_layers, remat). An SFT run config made by `sft.sft_config()` has neither:
its model is loaded in float32 and, in a multi-process run, sharded over every
device of every process (`stage_kind.spread`), each batch replicated; one process
runs it on one device. `add_execution` gives it the same two blocks (same
names and meanings; defaults = the RL defaults): the model is then loaded in
those dtypes, sharded on `mesh` by its rules, and each batch's rows are split
over the mesh's data x fsdp axes.

The blocks are added, not defaults of `sft_config`: a pipeline config made
before them keeps its JSON (its stages' run configs as they were written).

`apply(c, ...)` sets one mesh and precision on every trainable stage of a
pipeline (a merge stage runs on the host and has none).
"""

from __future__ import annotations

import math

import ml_collections
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models import load_pretrained
from rlvr_jax.models.config import ATTENTION_IMPLS, REMAT_POLICIES
from rlvr_jax.models.transformer import with_execution
from rlvr_jax.pipeline.graph import stage_names
from rlvr_jax.pipeline.stage_kind import SPREAD_RULES, spread
from rlvr_jax.rl.build import build_mesh, jnp_dtype
from rlvr_jax.rl.config import MODEL_DTYPES, default_config

# The RL config's `model` fields the execution block has (how the model runs, not which).
EXECUTION_FIELDS = ("param_dtype", "dtype", "attention", "attention_block", "scan_layers", "remat")
TRAINER_KINDS = ("rl", "opd", "dpo")  # kinds whose run config is an RL config


def execution_config() -> ml_collections.ConfigDict:
    """The optional mesh and precision blocks (`add_execution`), with the RL defaults."""
    rl = default_config()
    c = ml_collections.ConfigDict()
    c.mesh = ml_collections.ConfigDict(rl.mesh.to_dict())  # shape (data, fsdp, tensor), rules
    c.model = ml_collections.ConfigDict({k: rl.model[k] for k in EXECUTION_FIELDS})
    return c


def add_execution(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Adds the `mesh` and `model` blocks to SFT run config `c` (in place; kept if present).

    Returns:
      `c`, still locked, its new fields set to the RL defaults (`execution_config`).
    """
    if not has_execution(c):
        with c.unlocked():
            for key, block in execution_config().items():
                c[key] = block
    return c


def has_execution(c) -> bool:
    """Whether SFT run config `c` (a ConfigDict or its JSON dict) has the mesh and model blocks."""
    return "mesh" in c and "model" in c


def apply(
    c: ml_collections.ConfigDict,
    *,
    mesh_shape: tuple[int, int, int],
    rules: str = "fsdp",
    **model: object,
) -> ml_collections.ConfigDict:
    """Gives every trainable stage of pipeline `c` one mesh and precision (in place).

    Args:
      c: a pipeline config (`pipeline.config`).
      mesh_shape, rules: each stage's `mesh.shape` and `mesh.rules`.
      **model: `model.<field>` values of EXECUTION_FIELDS (unnamed fields keep each
        stage's value); SFT stages get the blocks first (`add_execution`).
    Returns:
      `c`, for chaining.
    """
    bad = sorted(set(model) - set(EXECUTION_FIELDS))
    if bad:
        raise ValueError(f"execution fields {bad}; valid: {', '.join(EXECUTION_FIELDS)}")
    for name in stage_names(c):
        s = c.stages[name]
        if s.kind == "sft":
            add_execution(s.run)
        elif s.kind not in TRAINER_KINDS:
            continue
        s.run.mesh.shape, s.run.mesh.rules = tuple(mesh_shape), rules
        for field, value in model.items():
            s.run.model[field] = value
    return c


def check(c, where: str) -> None:
    """The SFT execution blocks' choices (if present); ValueError naming the field."""
    if "mesh" not in c and "model" not in c:
        return

    if not has_execution(c):
        raise ValueError(f"{where}: has only one of mesh / model; add both with add_execution")
    m = c.model
    for field, value, valid in (
        ("model.param_dtype", m.param_dtype, MODEL_DTYPES),
        ("model.dtype", m.dtype, MODEL_DTYPES),
        ("model.attention", m.attention, ATTENTION_IMPLS),
        ("model.remat", m.remat, REMAT_POLICIES),
        ("mesh.rules", c.mesh.rules, tuple(sharding.RULES)),
    ):
        if value not in valid:
            raise ValueError(f"{where}.{field} = {value!r}; valid: {', '.join(map(repr, valid))}")
    shape = tuple(c.mesh.shape)
    if (
        len(shape) != len(sharding.AXES)
        or shape.count(-1) > 1
        or any(s == 0 or s < -1 for s in shape)
    ):
        raise ValueError(
            f"{where}.mesh.shape = {shape!r}; needs one size per axis of {sharding.AXES} "
            "(positive, at most one -1)"
        )
    shards = math.prod(shape[:2])
    if -1 not in shape[:2] and c.train.batch_size % shards:
        raise ValueError(
            f"{where}.train.batch_size = {c.train.batch_size} must be a multiple of the "
            f"mesh's {shards} batch shards (data x fsdp of mesh.shape = {shape})"
        )


def load_policy(c, init_dir: str):
    """An SFT stage's start model (or teacher), placed: (model, mesh or None, rules).

    Without the execution blocks: float32, sharded by `stage_kind.spread` (multi-process
    only). With them: `model.*` dtypes and execution options, sharded on `mesh`.
    """
    if not has_execution(c):
        model, _ = load_pretrained(init_dir)
        return model, spread(model), SPREAD_RULES

    m = c.model
    dtype, compute = jnp_dtype(m.param_dtype), jnp_dtype(m.dtype)
    model, _ = load_pretrained(init_dir, dtype, compute_dtype=compute)
    options = {k: m[k] for k in EXECUTION_FIELDS if k not in ("param_dtype", "dtype")}
    model = with_execution(model, **options)
    mesh = build_mesh(c)
    nnx.update(model, sharding.shard_state(nnx.state(model), mesh, c.mesh.rules))
    return model, mesh, c.mesh.rules
