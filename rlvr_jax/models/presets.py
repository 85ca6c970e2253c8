"""Architectures of the checkpoints the seed papers train, as ModelConfig presets (no download).

The numbers are the published Hugging Face `config.json` values of each model
(hidden size, SwiGLU width, layers, heads, kv heads, head_dim, vocabulary, RoPE,
tied embeddings). They let a memory plan (`rlvr_jax.plan`) or a shape test build
a paper-size model abstractly without the checkpoint; training from real weights
still reads the checkpoint's own config.json (`models.load_pretrained`).

Published totals, for reference (`ModelConfig.num_params()` reproduces them):
Qwen3-0.6B 0.60B, Qwen3-1.7B 1.72B, Qwen3-4B 4.02B, Qwen3-8B 8.19B,
Qwen2.5-3B 3.09B, Qwen2.5-7B 7.62B, Qwen2.5-32B 32.76B, Qwen2.5-Math-1.5B 1.54B,
Qwen2.5-Math-7B 7.62B, DeepSeek-R1-Distill-Qwen-1.5B 1.78B, Llama-3.1-8B 8.03B.
"""

from __future__ import annotations

import os
import re

from rlvr_jax.models.config import ModelConfig

_QWEN_VOCAB = 151936
_QWEN3 = dict(
    model_type="qwen3",
    vocab_size=_QWEN_VOCAB,
    head_dim=128,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    qk_norm=True,
    max_position_embeddings=40960,
    bos_token_id=151643,
    eos_token_id=151645,
    pad_token_id=151643,
)
_QWEN25 = dict(
    model_type="qwen2",
    head_dim=128,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    qkv_bias=True,
    bos_token_id=151643,
    eos_token_id=151643,
    pad_token_id=151643,
)

# name -> the fields that differ from the family defaults above.
_PRESETS = {
    "qwen3-0.6b": dict(
        _QWEN3,
        hidden_size=1024,
        intermediate_size=3072,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        tie_word_embeddings=True,
    ),
    "qwen3-1.7b": dict(
        _QWEN3,
        hidden_size=2048,
        intermediate_size=6144,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        tie_word_embeddings=True,
    ),
    "qwen3-4b": dict(
        _QWEN3,
        hidden_size=2560,
        intermediate_size=9728,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        _QWEN3,
        hidden_size=4096,
        intermediate_size=12288,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        tie_word_embeddings=False,
    ),
    "qwen2.5-3b": dict(
        _QWEN25,
        vocab_size=_QWEN_VOCAB,
        hidden_size=2048,
        intermediate_size=11008,
        num_layers=36,
        num_heads=16,
        num_kv_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
    ),
    "qwen2.5-7b": dict(
        _QWEN25,
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
    ),
    "qwen2.5-32b": dict(
        _QWEN25,
        vocab_size=152064,
        hidden_size=5120,
        intermediate_size=27648,
        num_layers=64,
        num_heads=40,
        num_kv_heads=8,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
    ),
    # The math continual-pretraining checkpoints: Qwen2.5 shapes, 4k context, RoPE θ 1e4.
    "qwen2.5-math-1.5b": dict(
        _QWEN25,
        vocab_size=_QWEN_VOCAB,
        hidden_size=1536,
        intermediate_size=8960,
        num_layers=28,
        num_heads=12,
        num_kv_heads=2,
        tie_word_embeddings=True,
        rope_theta=10_000.0,
        max_position_embeddings=4096,
    ),
    "llama-3.1-8b": dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=500_000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
        bos_token_id=128000,
        eos_token_id=128001,
    ),
}
# Same shapes as a preset above, another context / RoPE / head tying.
_PRESETS["qwen2.5-math-7b"] = dict(
    _PRESETS["qwen2.5-7b"], rope_theta=10_000.0, max_position_embeddings=4096
)
# Distilled from DeepSeek-R1 into Qwen2.5-Math-1.5B: its shapes, an untied head, 128k
# context, the R1 tokenizer's special ids.
_PRESETS["deepseek-r1-distill-qwen-1.5b"] = dict(
    _PRESETS["qwen2.5-math-1.5b"],
    tie_word_embeddings=False,
    max_position_embeddings=131072,
    bos_token_id=151646,
    eos_token_id=151643,
    pad_token_id=151643,
)

NAMES = tuple(_PRESETS)


def preset(name: str, **overrides) -> ModelConfig:
    """The ModelConfig of a published checkpoint.

    Args:
      name: one of NAMES (case-insensitive, e.g. "qwen3-8b", "Qwen3-8B").
      **overrides: ModelConfig fields to change (e.g. param_dtype="bfloat16").
    Returns:
      The ModelConfig. ValueError listing NAMES on an unknown name.
    """
    key = name.lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown model preset {name!r}; valid: {', '.join(NAMES)}")
    return ModelConfig(**{**_PRESETS[key], **overrides})


def preset_for_path(path: str) -> str | None:
    """The preset a checkpoint path names by its last component ("gs://b/Qwen3-8B" -> "qwen3-8b").

    Matches the directory name against NAMES, ignoring case and a trailing
    "-Base"/"-Instruct" suffix. Returns None when no preset matches.
    """
    base = os.path.basename(os.path.normpath(path.rstrip("/"))).lower()
    base = re.sub(r"-(base|instruct)$", "", base)
    return base if base in _PRESETS else None
