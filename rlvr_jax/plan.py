"""Ahead-of-time memory plan: will a config fit a slice, before anything is allocated?

`memory_plan` builds the policy abstractly (`nnx.eval_shape`: shapes only), an
abstract `RLState` with the AdamW state, and compiles ahead of time, for a mesh
of N devices, the two programs a GRPO run spends its memory in:

  train   one optimizer update on one micro-batch of [rows, T] (the jitted
          `rl.update.make_update(..., mesh=)` program, state donated);
  sample  the sampler's prefill + decode `while_loop` for one rollout batch
          (`sampling.Sampler`'s jitted `_generate`, KV cache of P + N slots).

It reports XLA's per-device `compiled.memory_analysis()` (argument, output,
alias, temp and generated-code bytes) and an analytic split from the shardings:
params, optimizer state and KV cache bytes per device. With N fake CPU devices
(`--xla_force_host_platform_device_count=N`) this runs on a laptop.

Compiling a 36-layer 8B model on 64 fake devices takes ~2.5 minutes on one CPU
core, so by default each program is compiled at two small depths (`layers=(2, 4)`)
and every XLA number is extrapolated linearly in the layer count (exact for the
arguments and outputs; temp buffers grow per layer without rematerialisation).
The analytic split is always computed at the full depth. Against a full-depth
compile (Qwen3-8B, 64 devices) the extrapolated temp was within -2% (train) and
+6% (sampler); see docs/tpu_pods.md. Note the numbers are
the CPU backend's buffer assignment: TPU fuses differently, so treat temp as an
estimate within tens of percent, and keep a margin.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models import load_config, presets
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.tiny import tiny_config
from rlvr_jax.models.transformer import KVCache, Transformer, abstract_model
from rlvr_jax.pipeline.execution import EXECUTION_FIELDS, has_execution
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import objectives
from rlvr_jax.rl.build import loss_spec, policy_optimizer
from rlvr_jax.rl.objectives import LossSpec
from rlvr_jax.rl.update import RLState, make_update
from rlvr_jax.sampling.generate import MAX_STOP_IDS, cache_slots, work_bytes_per_row
from rlvr_jax.sampling.sampler import Sampler
from rlvr_jax.train import sft

GIB = 1 << 30
HBM_BYTES = {"v5p": 95e9, "v5e": 16e9}  # HBM per chip (published, decimal GB)
_FIELDS = ("argument", "output", "alias", "temp", "generated_code")


@dataclasses.dataclass(frozen=True)
class Memory:
    """Per-device bytes of one compiled program (XLA's memory analysis)."""

    argument: float
    output: float
    alias: float  # outputs that reuse donated argument buffers
    temp: float  # activations and other scratch
    generated_code: float

    @property
    def peak(self) -> float:
        """Live bytes at the program's peak: inputs + non-aliased outputs + temp."""
        return self.argument + self.output - self.alias + self.temp + self.generated_code

    @classmethod
    def of(cls, compiled) -> Memory:
        m = compiled.memory_analysis()
        return cls(*(float(getattr(m, f"{f}_size_in_bytes")) for f in _FIELDS))

    def extrapolate(self, other: Memory, layers: tuple[int, int], target: int) -> Memory:
        """Linear in the layer count through (layers[0], self) and (layers[1], other)."""
        lo, hi = layers
        t = (target - lo) / (hi - lo)
        return Memory(
            *(
                a + t * (b - a)
                for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)
            )
        )


@dataclasses.dataclass(frozen=True)
class Plan:
    """A memory plan; every byte count is per device."""

    model: ModelConfig
    mesh_shape: tuple[int, int, int]
    rules: str
    train_rows: int  # rows of the compiled micro-batch (all devices)
    train_length: int  # T = P + N
    sample_rows: int  # rows of one sampler call
    sample_calls: int  # calls per rollout batch
    prompt_len: int  # P
    max_new_tokens: int  # N
    compiled_layers: tuple[int, ...]  # depths compiled; (L,) = exact, else extrapolated
    train: Memory
    sample: Memory
    params_bytes: float
    opt_state_bytes: float
    kv_cache_bytes: float
    work_bytes: float  # estimated working memory of a call's rows (work_bytes_per_row)

    @property
    def devices(self) -> int:
        return math.prod(self.mesh_shape)

    def format(self) -> str:
        """A human-readable report (GiB per device)."""
        g = _fmt
        cfg, L = self.model, self.model.num_layers
        how = (
            f"compiled at the full depth ({L} layers)"
            if self.compiled_layers == (L,)
            else f"compiled at {self.compiled_layers} layers, XLA numbers extrapolated "
            f"linearly to {L} layers"
        )
        shards = self.mesh_shape[0] * self.mesh_shape[1]
        lines = [
            f"model: {cfg.model_type} {cfg.num_params() / 1e9:.2f}B params, L={L}, "
            f"params {cfg.param_dtype}, compute {cfg.dtype}",
            f"execution: attention {cfg.attention!r} (block {cfg.attention_block}), "
            f"scan_layers={cfg.scan_layers}, remat {cfg.remat!r}",
            f"mesh (data, fsdp, tensor) = {self.mesh_shape} = {self.devices} devices, "
            f"rules {self.rules!r}; {how}",
            "analytic, per device:",
            f"  params          {g(self.params_bytes)}",
            f"  optimizer state {g(self.opt_state_bytes)}  (AdamW mu + nu)",
            f"  KV cache        {g(self.kv_cache_bytes)}  ({self.sample_rows} rows x "
            f"{self.prompt_len + self.max_new_tokens} tokens, {self.sample_rows // shards} "
            "rows/device)",
            f"  sampler work    {g(self.work_bytes)}  (estimate, generate.work_bytes_per_row)",
        ]
        for name, m, what in (
            (
                "train step",
                self.train,
                f"one micro-batch of {self.train_rows} x "
                f"{self.train_length} tokens, {self.train_rows // shards} rows/device",
            ),
            (
                "sampler",
                self.sample,
                f"one call of {self.sample_rows} rows (a rollout batch takes "
                f"{self.sample_calls}), P={self.prompt_len}, N={self.max_new_tokens}",
            ),
        ):
            lines += [
                f"XLA {name} ({what}), per device:",
                f"  arguments {g(m.argument)}   outputs {g(m.output)}   aliased {g(m.alias)}",
                f"  temp      {g(m.temp)}   code    {g(m.generated_code)}",
                f"  peak      {g(m.peak)}  (upper bound: arguments + outputs - aliased + temp)",
            ]
        worst = max(self.train.peak, self.sample.peak)
        fits = ", ".join(
            f"{k} {v / GIB:.1f} GiB: {'fits' if worst < 0.9 * v else 'does NOT fit'}"
            for k, v in HBM_BYTES.items()
        )
        lines.append(f"HBM per chip (with a 10% margin) — {fits}")
        return "\n".join(lines)


def _fmt(b: float) -> str:
    """Bytes as GiB (or MiB below 1 GiB), fixed width."""
    return f"{b / GIB:8.2f} GiB" if b >= GIB else f"{b / (1 << 20):8.2f} MiB"


def _tree_bytes(tree, shardings) -> float:
    """Per-device bytes of a tree of abstract arrays placed with `shardings`."""
    total = 0
    for leaf, sh in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings), strict=True):
        total += math.prod(sh.shard_shape(leaf.shape)) * np.dtype(leaf.dtype).itemsize
    return float(total)


def _with_shardings(tree, shardings):
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def _abstract_state(config, optimizer, mesh, rules):
    """(graphdef, abstract RLState, abstract rest, RLState shardings), nothing allocated."""
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = RLState(
        params=params,
        opt_state=jax.eval_shape(optimizer.init, params),
        critic_params=None,
        critic_opt_state=None,
        step=jax.ShapeDtypeStruct((), jnp.int32),
        rng=jax.ShapeDtypeStruct((2,), jnp.uint32),
    )
    return graphdef, state, rest, sharding.rl_state_shardings(state, mesh, rules)


def _loss_inputs(spec, config, rows, length, topk, make):
    """Abstract [1, rows, ...] inputs of the batch fields the loss reads beyond the standard
    ones (teacher hidden states at the policy's width, top-k teacher log-probs/ids, ...)."""
    dims = {"B": (), "BxT": (length,), "BxTxD": (length, config.hidden_size)}
    dims["BxTxK"] = (length, topk)
    out = {}
    for field in objectives.POLICY_LOSSES.get(spec.name).requires:
        if field in batch_lib.UPDATE_FIELDS:  # the update computes these itself
            continue
        suffix = field.rsplit("_", 1)[1]
        if suffix not in dims:
            raise ValueError(f"memory plan: loss {spec.name!r} reads {field!r} (unknown shape)")
        dtype = jnp.bool_ if field == "correct_B" else jnp.int32 if "_ids_" in field else None
        out[field] = make((1, rows, *dims[suffix]), dtype or jnp.float32)
    return out


def _compile_train(config, optimizer, spec, mesh, rules, rows, length, topk=16):
    graphdef, state, rest, state_sh = _abstract_state(config, optimizer, mesh, rules)
    update = make_update(
        graphdef, optimizer, spec, constant=float(rows * length), mesh=mesh, rules=rules
    )
    rows_sh = sharding.batch_sharding(mesh, batch_dim=1)
    bxt = lambda dt: jax.ShapeDtypeStruct((1, rows, length), dt, sharding=rows_sh)  # noqa: E731
    mb = dict(
        tokens_BxT=bxt(jnp.int32),
        attention_mask_BxT=bxt(jnp.bool_),
        mask_BxT=bxt(jnp.bool_),
        old_logps_BxT=bxt(jnp.float32),
        adv_BxT=bxt(jnp.float32),
    )
    if spec.kl_coef:
        mb["ref_logps_BxT"] = bxt(jnp.float32)
    if spec.tis_cap or spec.correction != "none":
        mb["behaviour_logps_BxT"] = bxt(jnp.float32)
    make = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=rows_sh)  # noqa: E731
    for field, value in _loss_inputs(spec, config, rows, length, topk, make).items():
        mb.setdefault(field, value)
    mb = batch_lib.Batch(
        **{f: mb.pop(f, None) for f in batch_lib.FIELDS}, extra=mb
    )  # the update reads a Batch, as the trainer passes it
    rest_sh = sharding.tree_shardings(rest, mesh, rules, strict=False)
    args = (_with_shardings(state, state_sh), _with_shardings(rest, rest_sh), None, mb)
    return update.jitted(state, rest, None).lower(*args).compile()


def _compile_sft(config, optimizer, mesh, rules, rows, length):
    """The SFT stage's step (`train.sft.make_train_step`) on one [rows, T] batch, row-split."""
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = sft.TrainState(
        params, jax.eval_shape(optimizer.init, params), jax.ShapeDtypeStruct((), jnp.int32)
    )
    state_sh = sharding.tree_shardings(state, mesh, rules, strict=False)  # as shard_state
    rest_sh = sharding.tree_shardings(rest, mesh, rules, strict=False)
    row = sharding.batch_sharding(mesh)
    bxt = lambda dt: jax.ShapeDtypeStruct((rows, length), dt, sharding=row)  # noqa: E731
    batch = dict(
        tokens_BxT=bxt(jnp.int32), attention_mask_BxT=bxt(jnp.bool_), loss_mask_BxT=bxt(jnp.bool_)
    )
    step = sft.make_train_step(graphdef, optimizer, mesh=mesh, rules=rules)
    args = (_with_shardings(state, state_sh), _with_shardings(rest, rest_sh), batch)
    return step.lower(*args).compile()


def _compile_sample(config, mesh, rules, rows, prompt_len, max_new_tokens, cache_dtype):
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    sampler = Sampler(model, mesh=mesh, rules=rules, max_length=prompt_len + max_new_tokens)
    graphdef, state = nnx.split(model)
    state = _with_shardings(state, sharding.tree_shardings(state, mesh, rules, strict=False))
    row_sh, rep = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    per_row = lambda dt, *s: jax.ShapeDtypeStruct((rows, *s), dt, sharding=row_sh)  # noqa: E731
    args = (
        state,
        per_row(jnp.int32, prompt_len),
        per_row(jnp.bool_, prompt_len),
        jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=rep),
        per_row(jnp.float32),
        per_row(jnp.int32),
        per_row(jnp.float32),
        jax.ShapeDtypeStruct((MAX_STOP_IDS,), jnp.int32, sharding=rep),
        per_row(jnp.float32),
        per_row(jnp.bool_),
        jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
    )
    lowered = sampler._generate.lower(
        *args,
        graphdef=graphdef,
        max_new_tokens=max_new_tokens,
        noise_layer=None,
        cache_dtype=cache_dtype,
    )
    return lowered.compile()


def memory_plan(
    config: ModelConfig,
    mesh: jax.sharding.Mesh,
    rules: str,
    *,
    optimizer: optax.GradientTransformation,
    spec: LossSpec,
    train_rows: int,
    sample_rows: int,
    prompt_len: int,
    max_new_tokens: int,
    layers: tuple[int, int] | None = (2, 4),
    cache_dtype: str | None = None,
    sample_calls: int = 1,
    topk: int = 16,
) -> Plan:
    """Compiles the train step and the sampler for `mesh` on abstract shapes; per-device bytes.

    Args:
      config: the policy architecture (e.g. `models.presets.preset("qwen3-8b")`).
      mesh: the device mesh (fake CPU devices are fine); rules: a sharding.RULES preset.
      optimizer: the policy optimizer (its state is part of the train step's arguments).
      spec: the policy loss (adds ref/rollout log-prob inputs when it uses them).
      train_rows: rows of one micro-batch; a multiple of `sharding.batch_shards(mesh)`.
      sample_rows: rows of one sampler call (prompts x G); a multiple of the batch shards.
      prompt_len: P, the padded context length; max_new_tokens: N. Train T = P + N.
      layers: two depths to compile and extrapolate from, or None to compile all layers.
      cache_dtype: the sampler's KV cache dtype (None: the compute dtype).
      sample_calls: how many sampler calls of `sample_rows` one rollout batch takes
        (reported only).
      topk: K of a top-k distillation loss's teacher inputs (opd_topk_kl).
    Returns:
      A Plan (print `plan.format()`).
    """
    shards = sharding.batch_shards(mesh)
    for name, rows in (("train_rows", train_rows), ("sample_rows", sample_rows)):
        if rows % shards:
            raise ValueError(
                f"{name}={rows} does not split over the mesh's {shards} batch shards "
                f"(data x fsdp of {dict(mesh.shape)}); use a multiple of {shards}"
            )
    depths = _depths(config, layers)
    length = prompt_len + max_new_tokens
    train = _at_full_depth(
        config,
        depths,
        lambda cfg: _compile_train(cfg, optimizer, spec, mesh, rules, train_rows, length, topk),
    )
    sample = _at_full_depth(
        config,
        depths,
        lambda cfg: _compile_sample(
            cfg, mesh, rules, sample_rows, prompt_len, max_new_tokens, cache_dtype
        ),
    )

    _, state, _, state_sh = _abstract_state(config, optimizer, mesh, rules)
    slots = cache_slots(config, prompt_len, max_new_tokens)
    dtype = None if cache_dtype is None else jnp.dtype(cache_dtype)
    cache = jax.eval_shape(lambda: KVCache.zeros(config, sample_rows, slots, dtype))
    k_sh = lambda x: sharding.NamedSharding(  # noqa: E731
        mesh, sharding.logical_to_spec(sharding.CACHE_K_AXES, x.shape, mesh, rules)
    )
    v_sh = lambda x: sharding.NamedSharding(  # noqa: E731
        mesh, sharding.logical_to_spec(sharding.CACHE_V_AXES, x.shape, mesh, rules)
    )
    kv = _tree_bytes(cache.k, [k_sh(x) for x in cache.k])
    kv += _tree_bytes(cache.v, [v_sh(x) for x in cache.v])
    return Plan(
        model=config,
        mesh_shape=tuple(mesh.shape[a] for a in sharding.AXES),
        rules=rules if isinstance(rules, str) else "custom",
        train_rows=train_rows,
        train_length=length,
        sample_rows=sample_rows,
        sample_calls=sample_calls,
        prompt_len=prompt_len,
        max_new_tokens=max_new_tokens,
        compiled_layers=depths,
        train=train,
        sample=sample,
        params_bytes=_tree_bytes(state.params, state_sh.params),
        opt_state_bytes=_tree_bytes(state.opt_state, state_sh.opt_state),
        kv_cache_bytes=kv,
        work_bytes=sample_rows
        // shards
        * float(work_bytes_per_row(config, prompt_len, max_new_tokens)),
    )


def _depths(config: ModelConfig, layers: tuple[int, int] | None) -> tuple[int, ...]:
    """The depths to compile: the two of `layers`, or the full depth (None or ≥ full)."""
    full = config.num_layers
    return (full,) if layers is None or layers[1] >= full else tuple(layers)


def _at_full_depth(config: ModelConfig, depths: tuple[int, ...], compile_at) -> Memory:
    """`compile_at(config at depth d)`'s memory per d, extrapolated to the full depth."""
    measured = [Memory.of(compile_at(config.replace(num_layers=d))) for d in depths]
    if len(depths) == 1:
        return measured[0]
    return measured[0].extrapolate(measured[1], depths, config.num_layers)


def sft_memory_plan(
    config: ModelConfig,
    mesh: jax.sharding.Mesh,
    rules: str,
    *,
    optimizer: optax.GradientTransformation,
    rows: int,
    length: int,
    layers: tuple[int, int] | None = (2, 4),
) -> Plan:
    """`memory_plan` of an SFT step: the train program only (no sampler: its fields are 0).

    Args:
      config, mesh, rules, optimizer, layers: as in `memory_plan`.
      rows: examples per step (the whole batch is one program: no micro-batches).
      length: T, the padded example length.
    Returns:
      A Plan whose sample program, KV cache and sampler rows are zero.
    """
    shards = sharding.batch_shards(mesh)
    if rows % shards:
        raise ValueError(f"rows={rows} does not split over the mesh's {shards} batch shards")
    depths = _depths(config, layers)
    train = _at_full_depth(
        config, depths, lambda cfg: _compile_sft(cfg, optimizer, mesh, rules, rows, length)
    )
    _, state, _, state_sh = _abstract_state(config, optimizer, mesh, rules)
    return Plan(
        model=config,
        mesh_shape=tuple(mesh.shape[a] for a in sharding.AXES),
        rules=rules if isinstance(rules, str) else "custom",
        train_rows=rows,
        train_length=length,
        sample_rows=0,
        sample_calls=0,
        prompt_len=0,
        max_new_tokens=0,
        compiled_layers=depths,
        train=train,
        sample=Memory(0.0, 0.0, 0.0, 0.0, 0.0),
        params_bytes=_tree_bytes(state.params, state_sh.params),
        opt_state_bytes=_tree_bytes(state.opt_state, state_sh.opt_state),
        kv_cache_bytes=0.0,
        work_bytes=0.0,
    )


def sft_plan_from_config(
    run, base, *, prompt_len: int = 1024, layers: tuple[int, int] | None = (2, 4)
) -> Plan:
    """`sft_memory_plan` for a pipeline's SFT stage with the execution blocks.

    Args:
      run: the SFT stage's run config (`pipeline.execution.add_execution`: mesh, model).
      base: the pipeline config (its `model` names the architecture, `policy_config`).
      prompt_len: P; the examples are planned at T = P + `data.max_new_tokens`.
      layers: as in `memory_plan`.
    """
    if not has_execution(run):
        raise ValueError("the SFT stage has no mesh / model blocks (pipeline.execution)")
    cfg = policy_config(base).replace(**{k: run.model[k] for k in EXECUTION_FIELDS})
    optimizer = sft.make_optimizer(
        run.train.lr, run.train.steps, end_lr_fraction=run.train.end_lr_fraction
    )
    shape = tuple(run.mesh.shape)
    devices = jax.devices() if -1 in shape else jax.devices()[: math.prod(shape)]
    return sft_memory_plan(
        cfg,
        sharding.make_mesh(shape, devices),
        run.mesh.rules,
        optimizer=optimizer,
        rows=run.train.batch_size,
        length=prompt_len + run.data.max_new_tokens,
        layers=layers,
    )


def policy_config(c, model: str = "") -> ModelConfig:
    """The policy architecture a run config names, without reading any weights.

    Args:
      c: the run ConfigDict (`config.model`).
      model: a `models.presets` name that overrides the config (e.g. "qwen3-8b").
    Returns:
      `model`'s preset; else for source "pretrained", `model.path/config.json` when
      that directory exists here, else the preset its last path component names
      ("gs://bucket/Qwen3-8B" -> "qwen3-8b"); for source "random", the tiny test model.
    """
    if model:
        return presets.preset(model)
    if c.model.source == "pretrained":
        if os.path.isfile(os.path.join(c.model.path, "config.json")):
            return load_config(c.model.path)
        name = presets.preset_for_path(c.model.path)
        if name is None:
            raise ValueError(
                f"config.model.path = {c.model.path!r} has no config.json here and names no "
                f"preset; pass a model preset, one of {', '.join(presets.NAMES)}"
            )
        return presets.preset(name)
    if c.model.source == "random":
        return tiny_config("qwen3", max_position_embeddings=512)
    raise ValueError(
        f"config.model.source = {c.model.source!r}: pass a model preset, one of "
        f"{', '.join(presets.NAMES)}"
    )


def plan_from_config(
    c,
    *,
    mesh_shape=None,
    rules: str | None = None,
    model: str = "",
    param_dtype: str = "",
    dtype: str = "",
    prompt_len: int = 1024,
    sample_rows: int = 0,
    max_new_tokens: int = 0,
    layers: tuple[int, int] | None = (2, 4),
) -> Plan:
    """`memory_plan` for a run config on the current devices (`jax.devices()`).

    Args:
      c: the run ConfigDict (model, data, train, rollout, loss, optimizer, mesh).
      mesh_shape, rules: override `config.mesh.shape` / `config.mesh.rules`.
      model: a preset name overriding the config's model (see `policy_config`).
      param_dtype, dtype: override `model.param_dtype` / `model.dtype` ("" = the config's).
      prompt_len: P, the padded prompt length (the config has no prompt-length field).
      sample_rows: rows of one sampler call (0: as the trainer's sampler calls it,
        prompts_per_step x group_size rows split by `rollout.cache_gib`, the budget
        of their KV cache plus working memory).
      max_new_tokens: N (0: `rollout.max_new_tokens`).
      layers: as in `memory_plan`.
    Returns:
      The Plan; the train micro-batch is `train.micro_batch_size` rows (or the
      whole minibatch) of P + N tokens. The model runs with the config's attention
      kernel, layer scan and remat policy.
    """
    m = c.model
    optimizer = policy_optimizer(c)
    cfg = policy_config(c, model).replace(
        param_dtype=param_dtype or m.param_dtype,
        dtype=dtype or m.dtype,
        attention=m.attention,
        attention_block=m.attention_block,
        scan_layers=m.scan_layers,
        remat=m.remat,
    )
    mesh = sharding.make_mesh(tuple(mesh_shape or c.mesh.shape))
    rules = rules or c.mesh.rules
    batch = c.data.prompts_per_step * c.data.group_size
    n = max_new_tokens or c.rollout.max_new_tokens
    cache_dtype = c.rollout.cache_dtype or None
    calls = 1
    if not sample_rows:
        sampler = Sampler(
            abstract_model(cfg),
            mesh=mesh,
            rules=rules,
            cache_bytes=c.rollout.cache_gib * GIB or None,
            cache_dtype=cache_dtype,
        )
        sample_rows = sampler.rows_per_call(batch, prompt_len, n)
        calls = -(-batch // sample_rows)
    return memory_plan(
        cfg,
        mesh,
        rules,
        optimizer=optimizer,
        spec=loss_spec(c),
        train_rows=c.train.micro_batch_size or batch // c.train.num_minibatches,
        sample_rows=sample_rows,
        prompt_len=prompt_len,
        max_new_tokens=n,
        layers=layers,
        cache_dtype=cache_dtype,
        sample_calls=calls,
        topk=c.score.teacher_topk.k,
    )
