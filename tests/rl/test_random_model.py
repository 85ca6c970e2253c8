"""`model.source = "random"` architectures: the tiny pulse model or a preset's (not allocated)."""

import ml_collections
import pytest

from rlvr_jax.models import presets
from rlvr_jax.rl.build import random_model_config
from rlvr_jax.train import warmstart


def _m(size, dtype="bfloat16"):
    return ml_collections.ConfigDict(dict(random_size=size, param_dtype=dtype, dtype=dtype))


def test_a_preset_size_is_that_architecture_over_the_shipped_tokenizer():
    tok = warmstart.default_tokenizer()
    cfg = random_model_config(_m("qwen3-0.6b"), tok)
    want = presets.preset("qwen3-0.6b")
    dims = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
    assert all(getattr(cfg, d) == getattr(want, d) for d in dims)
    assert (cfg.eos_token_id, cfg.dtype, cfg.param_dtype) == (tok.eos_id, "bfloat16", "bfloat16")
    assert 0.4e9 < cfg.num_params() < 0.7e9
    tiny = random_model_config(_m("tiny", "float32"), tok)
    assert tiny.vocab_size == tok.vocab_size and tiny.num_params() < 1e6


def test_an_unknown_size_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match=r"random_size = 'qwen9'; valid: tiny, qwen3-0.6b"):
        random_model_config(_m("qwen9"), warmstart.default_tokenizer())
