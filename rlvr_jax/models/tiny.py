"""Tiny model configs: the pulse runs' random policy ("random" model source), tests, benchmarks.

Small enough to compile and run in milliseconds on CPU; `bench_config` sizes
the sampler/trainer benchmarks. `rlvr_jax.testing` re-exports both.
"""

from __future__ import annotations

from rlvr_jax.models.config import ModelConfig

# Per-family architecture flags of the tiny configs (mirrors the real checkpoints).
_FAMILY_FLAGS = {
    "qwen3": dict(qk_norm=True, qkv_bias=False, tie_word_embeddings=False),
    "qwen2": dict(qk_norm=False, qkv_bias=True, tie_word_embeddings=True),
    "llama": dict(
        qk_norm=False,
        qkv_bias=False,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
}


def tiny_config(family: str = "qwen3", **overrides) -> ModelConfig:
    """A ~50k-parameter config of the given family (head_dim != hidden/heads, GQA)."""
    if family not in _FAMILY_FLAGS:
        raise ValueError(f"unknown family {family!r}; choose from {sorted(_FAMILY_FLAGS)}")
    fields = dict(
        model_type=family,
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=24,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=0,
    )
    fields.update(_FAMILY_FLAGS[family])
    fields.update(overrides)
    return ModelConfig(**fields)


def bench_config(size: str = "3m", family: str = "qwen3") -> ModelConfig:
    """Configs of the sampler/trainer benchmarks ("3m", "30m", "100m": ~3M, ~30M, ~100M params)."""
    sizes = {
        "3m": dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_layers=4,
                   num_heads=8, num_kv_heads=4, head_dim=32),
        "30m": dict(vocab_size=2048, hidden_size=512, intermediate_size=1536, num_layers=8,
                    num_heads=8, num_kv_heads=4, head_dim=64),
        "100m": dict(vocab_size=8192, hidden_size=768, intermediate_size=2304, num_layers=12,
                     num_heads=12, num_kv_heads=4, head_dim=64),
    }  # fmt: skip
    if size not in sizes:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(sizes)}")
    return tiny_config(family, max_position_embeddings=4096, **sizes[size])
