"""Builds what a run config names: the policy model and tokenizer, the task, the loss spec."""

from __future__ import annotations

import json
import logging
from typing import Any

import ml_collections

from rlvr_jax import tasks
from rlvr_jax.models import init_model, load_pretrained
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.rl.objectives import LossSpec
from rlvr_jax.tokenizers import Tokenizer

log = logging.getLogger(__name__)


def build_policy(c: ml_collections.ConfigDict) -> tuple[Transformer, Tokenizer]:
    """The initial policy and its tokenizer, from `config.model`.

    Sources: "warm_start" (the cached SFT model of `model.domain`/`model.role`,
    trained first if missing), "pretrained" (a Hugging Face directory at
    `model.path` with its tokenizer), "random" (a tiny randomly initialised
    Qwen3 with the shipped task tokenizer: for pulse tests).
    """
    from rlvr_jax.train import warmstart  # lazy: pulls in training code

    m = c.model
    if m.source == "warm_start":
        ws = warmstart.load_warm_start(m.domain, m.role)
        return ws.model, ws.tokenizer
    if m.source == "pretrained":
        model, _ = load_pretrained(m.path)
        return model, warmstart.load_model_tokenizer(m.path)
    if m.random_size != "tiny":
        raise ValueError(f"config.model.random_size = {m.random_size!r}; valid: tiny")
    from rlvr_jax.testing import tiny_config

    tokenizer = warmstart.default_tokenizer()
    config = tiny_config(
        "qwen3",
        vocab_size=tokenizer.vocab_size,
        eos_token_id=tokenizer.eos_id,
        max_position_embeddings=512,
    )
    return init_model(config, seed=c.seed), tokenizer


def task_options(c: ml_collections.ConfigDict) -> dict[str, Any]:
    """`config.task.options` (JSON), or the warm-start domain's options for its own task."""
    from rlvr_jax.train import warmstart

    if c.task.options:
        try:
            options = json.loads(c.task.options)
        except json.JSONDecodeError as e:
            raise ValueError(f"config.task.options is not a JSON object: {e}") from None
        if not isinstance(options, dict):
            raise ValueError(f"config.task.options must be a JSON object, got {c.task.options!r}")
        return options
    if c.model.source == "warm_start" and c.model.domain == c.task.name:
        return dict(warmstart.TASK_OPTIONS.get(c.task.name, {}))
    return {}


def build_task(c: ml_collections.ConfigDict) -> tasks.Task:
    return tasks.get(c.task.name, **task_options(c))


def total_updates(c: ml_collections.ConfigDict) -> int:
    """Optimizer updates in the whole run: steps × ppo_epochs × num_minibatches."""
    return c.train.steps * c.train.ppo_epochs * c.train.num_minibatches


def policy_optimizer(c: ml_collections.ConfigDict):
    """The policy's optax optimizer from `config.optimizer`, scheduled over every update."""
    from rlvr_jax.rl.update import build_optimizer

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
        entropy_coef=float(c.loss.entropy_coef),
        tis_cap=float(c.loss.tis_cap),
    )
