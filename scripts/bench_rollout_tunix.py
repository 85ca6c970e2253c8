"""google-tunix's vanilla `Sampler` as a `bench_rollout.py` engine (`tunix_runner`).

Install (no deps; tunix's other imports, flax etc., come from this repo's environment):
  pip install -q --no-deps --target /tmp/tunix_site google-tunix==0.1.7 clu==0.0.12 \
      google-metrax==0.2.4 jaxtyping==0.3.11 wadler_lindig==0.1.8 perfetto==0.59.1 pandas==3.1.1
  PYTHONPATH=/tmp/tunix_site python scripts/bench_rollout.py ... --tunix-path /tmp/tunix_site

The rlvr_jax checkpoint (HF format) loads through `tunix.models.qwen3.params
.create_model_from_safe_tensors` into a `ModelConfig` built from our dims (plus a rope
theta patch, see `load`); `runner` first checks tunix's greedy tokens against rlvr_jax's
(`check_greedy`). All P * G rows (prompts repeated G times) go in calls of `BATCH`
rows, left-padded to the longest prompt (`max_prompt_length` = its length, no bucketing),
temperature 1 with top_p = 1 and no top-k (tunix then draws from the full softmax), and
exactly `w.longest` new tokens per row: the only EOS id is -2, which is never sampled. The
pad id is -1 (its embedding lookup wraps to a real row, and it is masked): tunix finds
pads by value over the whole token buffer, decode steps included, so a pad id inside the
vocabulary would mask every generated copy of that token. Tunix's jitted programs read
the EOS ids at trace time, so every call must pass the same ones (here always -2).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from tunix.generate.sampler import CacheConfig, Sampler
from tunix.models.qwen3 import model as qwen3_model
from tunix.models.qwen3 import params as qwen3_params

PAD, EOS = -1, -2  # ids no model samples
_APPLY_ROPE = qwen3_model.apply_rope


class IdTokenizer:
    """The minimal tokenizer tunix accepts: "strings" are token id lists already."""

    def encode(self, ids, **kw):
        return [int(t) for t in ids]

    def decode(self, ids, **kw):
        return ""

    def bos_id(self):
        return None  # tunix prepends no BOS

    def eos_id(self):
        return EOS

    def pad_id(self):
        return PAD


def tunix_config(cfg) -> qwen3_model.ModelConfig:
    return qwen3_model.ModelConfig(
        num_layers=cfg.num_layers, vocab_size=cfg.vocab_size, embed_dim=cfg.hidden_size,
        hidden_dim=cfg.intermediate_size, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
        num_kv_heads=cfg.num_kv_heads, rope_theta=cfg.rope_theta, norm_eps=cfg.rms_norm_eps,
        use_tied_embedding=cfg.tie_word_embeddings,
    )  # fmt: skip


def load(hf_dir, cfg):
    """The tunix Qwen3 on `hf_dir`'s weights (float32, no mesh).

    tunix 0.1.7's Qwen3 attention calls `apply_rope` without `rope_theta` (so always
    1e6, whatever the config says): patched here to the checkpoint's theta.
    """
    if cfg.rope_scaling or not cfg.qk_norm or cfg.qkv_bias or cfg.o_bias:
        raise ValueError("tunix's Qwen3 has no rope scaling / biases and always has qk-norm")
    qwen3_model.apply_rope = functools.partial(_APPLY_ROPE, rope_theta=cfg.rope_theta)
    return qwen3_params.create_model_from_safe_tensors(hf_dir, tunix_config(cfg))


def make_sampler(tmodel, cfg, width: int, new: int) -> Sampler:
    cache = CacheConfig(width + new, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    return Sampler(tmodel, IdTokenizer(), cache)


def generate(sampler, rows, width, new, seed, temperature=1.0) -> np.ndarray:
    """[len(rows), new] sampled tokens (rows left-padded to `width`)."""
    kw = dict(temperature=temperature, top_p=1.0, top_k=None) if temperature else {}
    out = sampler(
        rows, max_generation_steps=new, max_prompt_length=width, eos_tokens=[EOS], seed=seed, **kw
    )
    assert out.padded_prompt_tokens.shape == (len(rows), width), out.padded_prompt_tokens.shape
    assert all(len(t) == new for t in out.tokens), [len(t) for t in out.tokens]
    return np.stack(out.tokens)


def check_greedy(hf_dir, model, cfg, new: int = 8):
    """Raises unless tunix's greedy tokens on hf_dir equal rlvr_jax's `Sampler` on `model`."""
    from rlvr_jax.sampling import Sampler as RlvrSampler
    from rlvr_jax.sampling import SamplingParams

    rng = np.random.RandomState(1)
    prompts = [rng.randint(3, cfg.vocab_size, n).tolist() for n in (5, 11)]
    params = SamplingParams(temperature=0.0, max_new_tokens=new)
    ours = RlvrSampler(model).sample(prompts, params, jax.random.key(0))
    ours = [ours.sampled_tokens(b) for b in range(len(prompts))]
    width = max(map(len, prompts))
    sampler = make_sampler(load(hf_dir, cfg), cfg, width, new)
    theirs = generate(sampler, prompts, width, new, seed=0, temperature=0.0).tolist()
    if theirs != ours:
        raise AssertionError(f"tunix greedy {theirs} != rlvr_jax greedy {ours}: weights mis-loaded")
    return theirs


BATCH = 128  # rows per tunix call: its prefill materialises [rows, heads, width, width]
# attention scores, and 512 rows of 512-token prompts ran this 23 GB machine out of memory


def runner(hf_dir, w, cfg):
    """`run(seed, warm=False) -> dict(waste, decode_steps)` over the whole workload.

    Rows in calls of BATCH (all at the same width, so one prefill and one decode-loop
    program serve every call); warm=True runs the first call only (tunix compiles one
    program of each per batch/width/steps, so that call compiles everything).
    """
    from rlvr_jax.models import load_pretrained

    check_greedy(hf_dir, load_pretrained(hf_dir)[0], cfg)
    rows = [p for p in w.prompts for _ in range(w.group)]
    width = max(map(len, rows))
    sampler = make_sampler(load(hf_dir, cfg), cfg, width, w.longest)

    def run(seed, warm=False):
        for i in range(0, BATCH if warm else len(rows), BATCH):
            part = rows[i : i + BATCH]
            toks = generate(sampler, part, width, w.longest, seed * 1000 + i)
            assert toks.shape == (len(part), w.longest) and toks.min() >= 0, toks.shape
        computed = len(rows) * (width + w.longest)
        return dict(waste=computed - w.necessary, decode_steps=w.longest)

    return run
