"""Decoder-only transformers (Qwen3, Qwen2/2.5, Llama 3.x), LoRA, value heads, HF checkpoints."""

from rlvr_jax.models.checkpoint import load_config, load_pretrained, save_pretrained
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.transformer import (
    HiddenPerturbation,
    KVCache,
    ModelOutput,
    Transformer,
    abstract_model,
    init_model,
)

__all__ = [
    "HiddenPerturbation",
    "KVCache",
    "ModelConfig",
    "ModelOutput",
    "Transformer",
    "abstract_model",
    "init_model",
    "load_config",
    "load_pretrained",
    "save_pretrained",
]
