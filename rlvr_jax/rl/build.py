"""Builds what a run config names: the policy model and tokenizer, the task, the loss spec."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from rlvr_jax import sharding, tasks
from rlvr_jax.models import init_model, load_pretrained, presets
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.tiny import tiny_config
from rlvr_jax.models.transformer import Transformer, with_execution
from rlvr_jax.optim import build_optimizer
from rlvr_jax.rl.objectives import LossSpec
from rlvr_jax.tasks.options import resolve_options
from rlvr_jax.tokenizers import Tokenizer

log = logging.getLogger(__name__)


def build_policy(c: ml_collections.ConfigDict) -> tuple[Transformer, Tokenizer]:
    """The initial policy and its tokenizer, from `config.model` (see `_build_policy`),
    computed with the config's attention kernel, layer scan and remat policy.
    """
    m = c.model
    model, tokenizer = _build_policy(c)
    options = dict(attention=m.attention, attention_block=m.attention_block,
                   scan_layers=m.scan_layers, remat=m.remat)  # fmt: skip
    return with_execution(model, **options), tokenizer


def _build_policy(c: ml_collections.ConfigDict) -> tuple[Transformer, Tokenizer]:
    """The initial policy and its tokenizer, from `config.model`.

    Sources: "warm_start" (the cached SFT model of `model.domain`/`model.role`,
    trained first if missing), "pretrained" (a Hugging Face directory at
    `model.path` with its tokenizer), "random" (a tiny randomly initialised
    Qwen3 with the shipped task tokenizer, for pulse tests, or a preset's architecture:
    `random_model_config`). Parameters are
    stored in `model.param_dtype` and computed in `model.dtype`.
    """
    from rlvr_jax.train import warmstart  # lazy: pulls in training code

    m = c.model
    if m.source == "warm_start":
        ws = warmstart.load_warm_start(m.domain, m.role)
        return with_dtypes(ws.model, m.param_dtype, m.dtype), ws.tokenizer
    if m.source == "pretrained":
        dtype = jnp_dtype(m.param_dtype)
        model, _ = load_pretrained(m.path, dtype, compute_dtype=jnp_dtype(m.dtype))
        return model, warmstart.load_model_tokenizer(m.path)
    tokenizer = warmstart.default_tokenizer()
    return init_model(random_model_config(m, tokenizer), seed=c.seed), tokenizer


def random_model_config(m: ml_collections.ConfigDict, tokenizer) -> ModelConfig:
    """The architecture of a `model.source = "random"` policy (`model.random_size`).

    "tiny": the pulse tests' Qwen3 over the shipped tokenizer's vocabulary; a preset
    name (`models.presets.NAMES`, e.g. "qwen3-0.6b"): that checkpoint's architecture
    and vocabulary, randomly initialised (speed and memory checks; the shipped
    tokenizer's ids are a prefix of its vocabulary).
    """
    dtypes = dict(param_dtype=m.param_dtype, dtype=m.dtype)
    if m.random_size == "tiny":
        return tiny_config(
            "qwen3",
            vocab_size=tokenizer.vocab_size,
            eos_token_id=tokenizer.eos_id,
            max_position_embeddings=512,
            **dtypes,
        )
    if m.random_size not in presets.NAMES:
        raise ValueError(
            f"config.model.random_size = {m.random_size!r}; valid: tiny, "
            + ", ".join(presets.NAMES)
        )
    cfg = presets.preset(m.random_size, eos_token_id=tokenizer.eos_id, **dtypes)
    if cfg.vocab_size < tokenizer.vocab_size:
        raise ValueError(
            f"config.model.random_size = {m.random_size!r}: its vocabulary of {cfg.vocab_size} "
            f"is smaller than the shipped tokenizer's {tokenizer.vocab_size}"
        )
    return cfg


def jnp_dtype(name: str):
    """The jnp dtype of a config dtype name ("float32" / "bfloat16")."""
    valid = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
    if name not in valid:
        raise ValueError(f"dtype {name!r}; valid: {', '.join(valid)}")
    return valid[name]


def with_dtypes(model: Transformer, param_dtype: str, dtype: str) -> Transformer:
    """`model` rebuilt to store params in `param_dtype` and compute in `dtype`.

    Args:
      model: a Transformer.
      param_dtype, dtype: "float32" / "bfloat16".
    Returns:
      `model` itself when both already match, else a new Transformer whose
      floating params are `model`'s cast to `param_dtype`.
    """
    cfg = model.config
    if (cfg.param_dtype, cfg.dtype) == (param_dtype, dtype):
        return model
    new_cfg = dataclasses.replace(cfg, param_dtype=param_dtype, dtype=dtype)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(new_cfg, rngs=nnx.Rngs(0))))
    target = jnp_dtype(param_dtype)
    params, rest = nnx.state(model, nnx.Param, ...)
    params = jax.tree.map(
        lambda x: x.astype(target) if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) else x,
        params,
    )
    return nnx.merge(graphdef, params, rest)


def build_mesh(c: ml_collections.ConfigDict) -> jax.sharding.Mesh:
    """The device mesh of `config.mesh.shape` (axes data, fsdp, tensor).

    A shape without -1 that needs fewer devices than the machine has runs on the
    first devices (the default (1, 1, 1): one device); a multi-host run must span
    every device of every process.

    Returns:
      A `jax.sharding.Mesh`.
    """
    shape = tuple(int(s) for s in c.mesh.shape)
    devices = jax.devices()
    if -1 not in shape and 0 < math.prod(shape) < len(devices):
        if jax.process_count() > 1:
            raise ValueError(
                f"config.mesh.shape = {shape} uses {math.prod(shape)} of the {len(devices)} "
                f"devices of a {jax.process_count()}-process run; a multi-host mesh must use "
                "them all (e.g. (1, -1, 1))"
            )
        devices = devices[: math.prod(shape)]
    return sharding.make_mesh(shape, devices)


def task_options(c: ml_collections.ConfigDict) -> dict[str, Any]:
    """`config.task.options` (JSON), or the warm-start domain's options for its own task."""
    domain = c.model.domain if c.model.source == "warm_start" else ""
    return resolve_options(c.task.options, c.task.name, domain)


def build_task(c: ml_collections.ConfigDict) -> tasks.Task:
    return tasks.get(c.task.name, **task_options(c))


def total_updates(c: ml_collections.ConfigDict) -> int:
    """Optimizer updates in the whole run: steps × ppo_epochs × num_minibatches."""
    return c.train.steps * c.train.ppo_epochs * c.train.num_minibatches


def policy_optimizer(c: ml_collections.ConfigDict):
    """The policy's optax optimizer from `config.optimizer`, scheduled over every update."""
    o = c.optimizer
    return build_optimizer(
        o.lr,
        total_updates(c),
        warmup_steps=o.warmup_steps,
        schedule=o.schedule,
        end_lr_fraction=o.end_lr_fraction,
        b1=o.b1,
        b2=o.b2,
        weight_decay=o.weight_decay,
        clip_norm=o.clip_norm,
        name=o.name,
        muon=o.muon.to_dict(),
        iso=o.iso.to_dict(),
    )


def loss_spec(c: ml_collections.ConfigDict) -> LossSpec:
    """The LossSpec of `config.loss`."""
    hparams = c.loss[c.loss.name].to_dict()
    return LossSpec(
        name=c.loss.name,
        hparams=tuple(sorted(hparams.items())),
        aggregation=c.loss.aggregation,
        kl_coef=float(c.loss.kl_coef),
        kl_kind=c.loss.kl_kind,
        kl_clamp=float(c.loss.kl_clamp),
        entropy_coef=float(c.loss.entropy_coef),
        tis_cap=float(c.loss.tis_cap),
        correction=c.loss.rollout_correction,
        correction_cap=float(c.loss.rollout_correction_cap),
    )
