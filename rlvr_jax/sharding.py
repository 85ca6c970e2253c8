"""The one sharding module: device mesh, logical axis names, rules, sharded init and placement.

Every parameter and the main activations carry *logical* axis names ("embed",
"heads", "mlp", "vocab", "batch", ...). A *rule set* maps logical names to the
mesh axes `data`, `fsdp` and `tensor`; it is plain data (a tuple of
(logical, mesh axes) pairs) that a config can hold, with presets:

  dp       params replicated; batch rows over (data, fsdp).
  fsdp     params sharded on their embed dim over fsdp (ZeRO-3 style).
  tp       Megatron tensor parallelism: heads / kv_heads / mlp / vocab over tensor.
  fsdp_tp  both.

Two rules make any rule set valid for any shapes: a mesh axis is used at most
once per array (earlier dims win, so activations' "batch" takes fsdp before
their "embed" could), and a dim whose size the mesh axes do not divide is left
unsharded on the axes that do not fit (e.g. 2 kv heads on tensor=4).

Parameters get their logical names from their path (`PARAM_AXES`, regexes on
"layers/0/self_attn/q_proj/kernel"), so the model code stays unannotated; the
few activations worth pinning call `constrain(x, names)`, which is a no-op
unless a computation is traced inside `activate(mesh, rules)`.

Usage:
  mesh = make_mesh((1, -1, 1))                    # all devices on fsdp
  model = models.sharded_init.init_sharded(config, mesh, "fsdp", seed=0)
  state = shard_state(state, mesh, "fsdp")       # e.g. an RLState
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import re

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

_BATCH = (("batch", BATCH_AXES),)
_TP = (("heads", "tensor"), ("kv_heads", "tensor"), ("mlp", "tensor"), ("vocab", "tensor"))
RULES = {
    "dp": _BATCH,
    "fsdp": _BATCH + (("embed", "fsdp"),),
    "tp": _BATCH + _TP,
    "fsdp_tp": _BATCH + (("embed", "fsdp"),) + _TP,
}

# Projection -> (input, output) logical names; LoRA adapters inherit them.
_PROJ = {
    "q_proj": ("embed", "heads"),
    "k_proj": ("embed", "kv_heads"),
    "v_proj": ("embed", "kv_heads"),
    "o_proj": ("heads", "embed"),
    "gate_proj": ("embed", "mlp"),
    "up_proj": ("embed", "mlp"),
    "down_proj": ("mlp", "embed"),
}
# (regex on the "/"-joined path, logical names per dim). First match wins.
PARAM_AXES = (
    (r"(^|/)embed_tokens$", ("vocab", "embed")),
    (r"(^|/)lm_head$", ("embed", "vocab")),
    *((rf"(^|/){p}/kernel$", io) for p, io in _PROJ.items()),
    *((rf"(^|/){p}/bias$", io[1:]) for p, io in _PROJ.items()),
    *((rf"(^|/){p}/lora/a$", (io[0], "lora_rank")) for p, io in _PROJ.items()),
    *((rf"(^|/){p}/lora/b$", ("lora_rank", io[1])) for p, io in _PROJ.items()),
    (r"(^|/)(q_norm|k_norm)/weight$", ("head_dim",)),
    (r"(^|/)(input_layernorm|post_attention_layernorm|norm)/weight$", ("norm",)),
    # Value heads (models/heads.py): [D, 1] or [D, M] kernels; tiny, kept whole per device.
    (r"(^|/)head/kernel$", ("embed", "value")),
    (r"(^|/)head/bias$", ("value",)),
)

# Logical names of the KV cache buffers (models/transformer.py KVCache).
CACHE_K_AXES = ("batch", "kv_heads", "head_dim", "cache_length")
CACHE_V_AXES = ("batch", "kv_heads", "cache_length", "head_dim")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Mesh shape over the axes (data, fsdp, tensor) and the logical rules.

    Attributes:
      shape: devices per axis; one entry may be -1 (= the rest of the devices).
      rules: a preset name (see RULES) or explicit ((logical, mesh axes), ...) pairs.
    """

    shape: tuple[int, int, int] = (1, -1, 1)
    rules: str | tuple = "fsdp"

    def make_mesh(self, devices=None) -> Mesh:
        return make_mesh(self.shape, devices)

    def resolved_rules(self) -> tuple:
        return resolve_rules(self.rules)


def make_mesh(shape, devices=None) -> Mesh:
    """A device mesh with axes ("data", "fsdp", "tensor").

    Args:
      shape: 3 ints; at most one -1, which takes the rest of the devices.
      devices: defaults to `jax.devices()` (every process's, for multi-host).
    Returns:
      A `jax.sharding.Mesh` with Auto axis types (GSPMD propagation).
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(AXES) or shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh shape {shape} must be 3 positive ints {AXES}, at most one -1")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if len(devices) % known:
            raise ValueError(f"mesh shape {shape}: {len(devices)} devices not divisible by {known}")
        shape = tuple(len(devices) // known if s == -1 else s for s in shape)
    if math.prod(shape) != len(devices):
        raise ValueError(
            f"mesh shape {shape} needs {math.prod(shape)} devices, have {len(devices)}"
        )
    return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def resolve_rules(rules) -> tuple:
    """A rule set as ((logical, (mesh axes...)), ...), from a preset name or explicit pairs."""
    if isinstance(rules, str):
        if rules not in RULES:
            raise ValueError(f"unknown sharding rules {rules!r}; presets: {sorted(RULES)}")
        rules = RULES[rules]
    out = []
    for logical, axes in rules:
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        bad = [a for a in axes if a not in AXES]
        if bad:
            raise ValueError(f"rule {logical!r} -> {axes}: unknown mesh axes {bad}; valid: {AXES}")
        out.append((logical, axes))
    return tuple(out)


def logical_to_spec(logical, shape, mesh: Mesh, rules) -> PartitionSpec:
    """The PartitionSpec of an array with these logical dim names under `rules`.

    Args:
      logical: one name (or None) per dim.
      shape: the array's shape (a dim keeps only the mesh axes whose sizes divide it).
      mesh: the device mesh.
      rules: preset name or pairs (see `resolve_rules`).
    Returns:
      PartitionSpec; each mesh axis appears at most once (earlier dims win).
    """
    table = dict(resolve_rules(rules))
    if len(logical) != len(shape):
        raise ValueError(f"{len(logical)} logical names {logical} for shape {shape}")
    used, spec = set(), []
    for name, size in zip(logical, shape, strict=True):
        axes, prod = [], 1
        for axis in table.get(name, ()):
            n = mesh.shape[axis]
            if axis in used or n == 1 or size % (prod * n):
                continue
            axes.append(axis)
            prod *= n
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def _path_str(path) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
    # nnx Variables flatten to their array under a trailing "value" key.
    if parts and parts[-1] == "value":
        parts.pop()
    return "/".join(parts)


def param_logical_axes(path: str, ndim: int):
    """Logical names of the parameter at `path` ("layers/0/mlp/up_proj/kernel"), or None."""
    for pattern, names in PARAM_AXES:
        if re.search(pattern, path) and len(names) == ndim:
            return names
    return None


def tree_shardings(tree, mesh: Mesh, rules, *, strict: bool = True):
    """NamedShardings for every array leaf of a params-like tree, by the leaf's path.

    Works for nnx.State of params, optimizer states built over them (their leaves
    end with the same paths, e.g. "mu/layers/0/mlp/up_proj/kernel") and RLState.

    Args:
      tree: pytree of arrays or ShapeDtypeStructs.
      mesh, rules: as in `logical_to_spec`.
      strict: raise on a non-scalar leaf whose path matches no PARAM_AXES entry
        (else replicate it). Scalars are always replicated.
    Returns:
      A pytree of NamedSharding with the structure of `tree`.
    """

    def one(path, leaf):
        shape = np.shape(leaf)
        names = param_logical_axes(_path_str(path), len(shape))
        if names is None:
            if strict and len(shape) > 0:
                raise ValueError(
                    f"no logical axes for parameter {_path_str(path)!r} {shape}; "
                    "add a pattern to rlvr_jax.sharding.PARAM_AXES"
                )
            names = (None,) * len(shape)
        return NamedSharding(mesh, logical_to_spec(names, shape, mesh, rules))

    return jax.tree_util.tree_map_with_path(one, tree)


def param_shardings(abstract_model_state, mesh: Mesh, rules):
    """Shardings of a model's state (`nnx.state(abstract_model(config))` or real arrays).

    Args:
      abstract_model_state: nnx.State (or any pytree) of the model's variables.
      mesh, rules: as in `logical_to_spec`.
    Returns:
      The matching pytree of NamedSharding; raises naming any unannotated parameter.
    """
    return tree_shardings(abstract_model_state, mesh, rules, strict=True)


def batch_sharding(mesh: Mesh, batch_dim: int = 0) -> NamedSharding:
    """Rows over (data, fsdp) at `batch_dim`, other dims whole (batch_dim=1: [n_micro, rows, T])."""
    return NamedSharding(mesh, PartitionSpec(*([None] * batch_dim), BATCH_AXES))


def batch_shards(mesh: Mesh) -> int:
    """How many ways batch rows are split: row counts must be a multiple of this."""
    return math.prod(mesh.shape[a] for a in BATCH_AXES)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def shard_state(tree, mesh: Mesh, rules, *, strict: bool = False):
    """Places a params-like tree (params, optimizer state, RLState, ...) on the mesh by path.

    Args:
      tree: pytree of arrays (host or device).
      mesh, rules: as in `logical_to_spec`.
      strict: as in `tree_shardings` (default False: unknown leaves replicate).
    Returns:
      The same tree with every leaf a sharded jax.Array.
    """
    return jax.device_put(tree, tree_shardings(tree, mesh, rules, strict=strict))


def rl_state_shardings(state, mesh: Mesh, rules):
    """Shardings of an `rl.update.RLState`: params and critic params by their paths,
    optimizer states following their params (same path suffixes), step and rng replicated.
    """
    rep = replicated(mesh)
    return state.replace(
        params=tree_shardings(state.params, mesh, rules),
        opt_state=tree_shardings(state.opt_state, mesh, rules, strict=False),
        critic_params=tree_shardings(state.critic_params, mesh, rules),
        critic_opt_state=tree_shardings(state.critic_opt_state, mesh, rules, strict=False),
        step=rep,
        rng=rep,
    )


def shard_rl_state(state, mesh: Mesh, rules):
    """Places an RLState on the mesh (see `rl_state_shardings`)."""
    return jax.device_put(state, rl_state_shardings(state, mesh, rules))


# ------------------------------------------------------------ activations
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("rlvr_jax_sharding", default=None)


@contextlib.contextmanager
def activate(mesh: Mesh, rules):
    """Within this context, `constrain` pins activations to `rules` on `mesh` (for tracing)."""
    token = _ACTIVE.set((mesh, resolve_rules(rules)))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active():
    """(mesh, resolved rules) of the enclosing `activate`, or None outside one."""
    return _ACTIVE.get()


def constrain(x, logical):
    """`with_sharding_constraint` by logical names; returns x unchanged outside `activate`.

    Args:
      x: an array being traced.
      logical: one logical name (or None) per dim of x.
    Returns:
      x, constrained to its sharding under the active rules.
    """
    active = _ACTIVE.get()
    if active is None:
        return x
    mesh, rules = active
    spec = logical_to_spec(logical, x.shape, mesh, rules)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def with_rules(fn, mesh: Mesh | None, rules):
    """`fn` traced inside `activate(mesh, rules)` (fn itself if mesh is None); same signature."""
    if mesh is None:
        return fn

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with activate(mesh, rules):
            return fn(*args, **kwargs)

    return wrapped


def constrain_cache(cache):
    """Pins a `KVCache`'s buffers (no-op outside `activate`): rows like the batch, kv heads
    over `tensor` where it divides them. Applied to a decode loop's carry, it keeps one
    layout across steps.
    """
    return cache.replace(
        k=tuple(constrain(k, CACHE_K_AXES) for k in cache.k),
        v=tuple(constrain(v, CACHE_V_AXES) for v in cache.v),
        valid_BxS=constrain(cache.valid_BxS, ("batch", "cache_length")),
    )
