"""Model configuration shared by the transformer, checkpoint I/O and the sampler.

One frozen dataclass covers the decoder-only families the seed papers train
(Qwen3, Qwen2/Qwen2.5, Llama 3.x). Family differences are explicit flags, so a
typo in a field name is an error rather than a silently different model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

# model_type -> architecture flags that the family fixes.
_FAMILIES = {
    "qwen3": {"qk_norm": True},
    "qwen2": {"qk_norm": False},
    "llama": {"qk_norm": False},
}

ATTENTION_IMPLS = ("xla", "blockwise", "pallas", "auto")
REMAT_POLICIES = ("none", "block", "dots")

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a decoder-only transformer.

    Attributes:
      model_type: "qwen3", "qwen2" or "llama" (Hugging Face `model_type`).
      vocab_size: V.
      hidden_size: D.
      intermediate_size: F, the SwiGLU width.
      num_layers: L.
      num_heads: N query heads.
      num_kv_heads: K key/value heads (GQA when K < N).
      head_dim: H; independent of D (Qwen3 uses H=128 at every size).
      rope_theta: RoPE base.
      rope_scaling: None, or a dict with "rope_type" in {"linear", "llama3"}
        and that type's fields (factor, low/high_freq_factor,
        original_max_position_embeddings).
      rms_norm_eps: RMSNorm epsilon.
      qk_norm: RMSNorm over head_dim on queries and keys (Qwen3).
      qkv_bias: bias on q/k/v projections (Qwen2; Llama attention_bias).
      o_bias: bias on the output projection (Llama attention_bias).
      tie_word_embeddings: lm head reuses the embedding matrix.
      max_position_embeddings: longest position the checkpoint was trained on.
      param_dtype: storage dtype of parameters ("float32" / "bfloat16").
      dtype: compute dtype of activations and matmuls.
      bos_token_id / eos_token_id / pad_token_id: from the checkpoint, if any.

    Execution options (how the same function is computed; not in checkpoints):
      attention: "xla" (dense scores, fastest at short lengths), "blockwise"
        (online softmax in blocks, O(T·block) memory, own backward), "pallas"
        (TPU splash attention for full passes, blockwise elsewhere) or "auto"
        (by key length: "xla" below `attention.AUTO_MIN_KEYS`, else blockwise with
        block `AUTO_BLOCK`, "pallas" on a TPU); see models/attention.py.
      attention_block: block length of the blockwise kernel ("blockwise", "pallas").
      scan_layers: run the blocks of a full pass (no KV cache) as one
        `lax.scan` over their stacked params: one compiled block, whatever L.
      remat: rematerialisation of each block in the backward pass: "none"
        (keep every activation), "block" (keep only each block's input) or
        "dots" (keep matmul outputs, recompute the rest).
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: tuple | None = None  # given as a dict; stored as sorted items (hashable)
    rms_norm_eps: float = 1e-6
    qk_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    param_dtype: str = "float32"
    dtype: str = "float32"
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    attention: str = "xla"
    attention_block: int = 512
    scan_layers: bool = False
    remat: str = "none"

    def __post_init__(self):
        if self.model_type not in _FAMILIES:
            raise ValueError(
                f"unknown model_type {self.model_type!r}; supported: {sorted(_FAMILIES)}"
            )
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r}; choose one of {sorted(_DTYPES)}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention={self.attention!r}; choose one of {ATTENTION_IMPLS}")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat={self.remat!r}; choose one of {REMAT_POLICIES}")
        if self.attention_block < 1:
            raise ValueError(f"attention_block={self.attention_block} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
        if isinstance(self.rope_scaling, dict):
            # Configs are static jit arguments, so every field must be hashable.
            object.__setattr__(self, "rope_scaling", tuple(sorted(self.rope_scaling.items())))
        if self.rope_scaling is not None:
            scaling = dict(self.rope_scaling)
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind not in ("linear", "llama3", "default"):
                raise ValueError(
                    f"rope_scaling type {kind!r} is not supported; "
                    "supported: default, linear, llama3"
                )

    @property
    def jnp_param_dtype(self):
        return _DTYPES[self.param_dtype]

    @property
    def jnp_dtype(self):
        return _DTYPES[self.dtype]

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        eos = self.eos_token_id
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (tuple, list)) else (int(eos),)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count (without LoRA adapters)."""
        d, f, h = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * h * (self.num_heads * 2 + self.num_kv_heads * 2)
        attn += (self.num_heads + 2 * self.num_kv_heads) * h * self.qkv_bias + d * self.o_bias
        attn += 2 * h * self.qk_norm
        layer = attn + 3 * d * f + 2 * d
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + emb + d

    # ------------------------------------------------------------------ HF I/O
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], *, param_dtype=None, dtype=None) -> ModelConfig:
        """Builds a config from a Hugging Face `config.json` dict.

        Args:
          hf: the parsed config.json.
          param_dtype / dtype: overrides ("float32" / "bfloat16"); default float32.
        Returns:
          The ModelConfig. Raises ValueError naming the field on anything we do
          not implement (unknown model_type, sliding windows, MLP bias, ...).
        """
        model_type = hf.get("model_type")
        if model_type not in _FAMILIES:
            raise ValueError(f"unknown model_type {model_type!r}; supported: {sorted(_FAMILIES)}")
        if hf.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true is not supported")
        if hf.get("mlp_bias"):
            raise ValueError("mlp_bias=true is not supported")
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act={act!r} is not supported (only 'silu')")
        required = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        for key in required:
            if key not in hf:
                raise ValueError(f"missing field {key!r}")
        # transformers>=5 moved rope settings into `rope_parameters`; older
        # checkpoints (every released Qwen/Llama) keep rope_theta/rope_scaling.
        rope = dict(hf.get("rope_parameters") or {})
        theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = hf.get("rope_scaling") or {k: v for k, v in rope.items() if k != "rope_theta"}
        if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
            scaling = None
        num_heads = hf["num_attention_heads"]
        attention_bias = bool(hf.get("attention_bias", False))
        eos = hf.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rope_theta=float(theta),
            rope_scaling=scaling or None,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            qk_norm=_FAMILIES[model_type]["qk_norm"],
            # Qwen2 always has q/k/v bias; Llama/Qwen3 follow attention_bias.
            qkv_bias=True if model_type == "qwen2" else attention_bias,
            o_bias=attention_bias if model_type == "llama" else False,
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position_embeddings=hf.get("max_position_embeddings", 32768),
            param_dtype=param_dtype or "float32",
            dtype=dtype or param_dtype or "float32",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=hf.get("pad_token_id"),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json dict that transformers loads into the same architecture."""
        if self.model_type == "qwen2" and not self.qkv_bias:
            raise ValueError("qwen2 checkpoints always have q/k/v bias; set qkv_bias=True")
        if self.model_type == "qwen3" and self.o_bias:
            raise ValueError("qwen3 has no output-projection bias option")
        if self.qk_norm != _FAMILIES[self.model_type]["qk_norm"]:
            raise ValueError(f"{self.model_type} checkpoints fix qk_norm={not self.qk_norm}")
        arch = {
            "qwen3": "Qwen3ForCausalLM",
            "qwen2": "Qwen2ForCausalLM",
            "llama": "LlamaForCausalLM",
        }
        out = {
            "architectures": [arch[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": dict(self.rope_scaling) if self.rope_scaling else None,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "torch_dtype": self.param_dtype,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_id)
            if isinstance(self.eos_token_id, tuple)
            else self.eos_token_id,
            "pad_token_id": self.pad_token_id,
        }
        if self.model_type in ("qwen3", "llama"):
            out["attention_bias"] = self.qkv_bias
        if self.model_type == "llama" and self.qkv_bias != self.o_bias:
            raise ValueError("llama attention_bias sets q/k/v and o bias together")
        if self.model_type == "qwen3" and self.qkv_bias:
            raise ValueError("qwen3 attention_bias would also be needed on o_proj; unsupported")
        return out


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse RoPE frequencies [H/2], with the checkpoint's scaling applied.

    Computed in float64 on the host so every family gets the exact frequencies
    transformers uses (its llama3 rule is piecewise in the wavelength).
    """
    h = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, h, 2, dtype=np.float64) / h))
    if not config.rope_scaling:
        return inv.astype(np.float32)
    scaling = dict(config.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = np.where(medium, smoothed, scaled)
    return inv.astype(np.float32)
