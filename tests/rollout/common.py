"""What the rollout tests share: the task tokenizer and a rollout context on a tiny policy."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.rollout import Request, RolloutContext
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import tiny_config
from rlvr_jax.train.warmstart import default_tokenizer

TOK = default_tokenizer()  # the task tokenizer: it renders the tasks' text


def tiny_policy(max_position_embeddings=512, seed=0):
    """(model, sampler): a tiny random Qwen3 over the task tokenizer."""
    cfg = tiny_config(
        vocab_size=TOK.vocab_size,
        eos_token_id=TOK.eos_id,
        max_position_embeddings=max_position_embeddings,
    )
    model = init_model(cfg, seed=seed)
    return model, Sampler(model, pad_id=TOK.pad_id or 0)


def rollout_ctx(policy, task, counts, key=0, max_new_tokens=8, **kw):
    """A RolloutContext asking `counts[i]` rows of the first len(counts) train problems."""
    model, sampler = policy
    params = SamplingParams(max_new_tokens=max_new_tokens, stop_token_ids=TOK.stop_ids)
    request = Request(task.problems(len(counts), "train"), np.asarray(counts))
    return RolloutContext(
        sampler, TOK, task, nnx.state(model), params, jax.random.PRNGKey(key), request, **kw
    )
