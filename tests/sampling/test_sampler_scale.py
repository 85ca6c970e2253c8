"""Sampler options for large batches: row chunks from a KV budget, a bf16 cache, blockwise decode.

Oracles: the unchunked sampler (greedy rollouts are deterministic, so chunking
must not change them) and teacher forcing of the same model (`token_logps`).
"""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models.transformer import with_execution
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams
from rlvr_jax.sampling.generate import cache_slots, kv_cache_bytes
from tests.sampling.test_sampler import (  # noqa: F401 (fixtures)
    CFG,
    GREEDY,
    N_NEW,
    PROMPTS4,
    assert_logps_match_teacher_forcing,
    assert_same_rollout,
    model,
    ref,
)

SLOTS = 16 + N_NEW
ROW_BYTES = kv_cache_bytes(CFG, 1, SLOTS)


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    c = CFG
    want = 3 * 40 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    assert kv_cache_bytes(c, 3, 40) == want
    assert kv_cache_bytes(c, 3, 40, "bfloat16") == want // 2


@pytest.mark.parametrize(
    "rows,budget_rows,want",
    [(4, None, 8), (20, None, 24), (20, 8, 8), (20, 17, 16), (40, 16, 16), (40, 24, 24)],
)
def test_rows_per_call_fits_the_budget_and_evens_out(model, rows, budget_rows, want):  # noqa: F811
    budget = None if budget_rows is None else budget_rows * ROW_BYTES
    sampler = Sampler(model, cache_bytes=budget)
    got = sampler.rows_per_call(rows, SLOTS)
    assert got == want and got % 8 == 0
    if budget is not None:
        assert got * ROW_BYTES <= budget


def test_a_budget_below_one_call_is_an_error(model):  # noqa: F811
    sampler = Sampler(model, cache_bytes=7 * ROW_BYTES)
    with pytest.raises(ValueError, match="holds 0 rows of 24 KV slots per call"):
        sampler.rows_per_call(4, SLOTS)


def test_chunked_greedy_sampling_equals_one_call(model, ref):  # noqa: F811
    prompts = PROMPTS4 * 5  # 20 rows: three calls of 8 under a budget of 8 rows
    one = Sampler(model).sample(prompts, GREEDY, jax.random.key(0))
    sampler = Sampler(model, cache_bytes=8 * ROW_BYTES, batch_multiple=4)
    assert sampler.rows_per_call(20, SLOTS) == 8
    chunked = sampler.sample(prompts, GREEDY, jax.random.key(0))
    assert_same_rollout(one, chunked)


def test_with_model_keeps_the_budget_and_dtype(model):  # noqa: F811
    """A sampler for another model (LSPO's LoRA copy) splits rows and stores the cache alike."""
    base = Sampler(model, cache_bytes=8 * ROW_BYTES, batch_multiple=4, cache_dtype="bfloat16")
    other = base.with_model(model)
    assert other is not base and other.model is model
    for attr in ("pad_id", "max_length", "batch_multiple", "mesh", "rules"):
        assert getattr(other, attr) == getattr(base, attr), attr
    assert (other.cache_bytes, other.cache_dtype) == (8 * ROW_BYTES, "bfloat16")
    # A bf16 cache holds twice the f32 rows of the budget: calls of 12 rows, not 8.
    assert other.rows_per_call(20, SLOTS) == base.rows_per_call(20, SLOTS) == 12


def test_chunked_sampling_logps_match_teacher_forcing(model, ref):  # noqa: F811
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    sampler = Sampler(model, cache_bytes=4 * ROW_BYTES, batch_multiple=4)
    r = sampler.sample(PROMPTS4, params, jax.random.key(3))  # 8 rows: two calls
    assert sampler.rows_per_call(8, SLOTS) == 4
    np.testing.assert_array_equal(r.group, np.repeat(np.arange(4), 2))
    for half in (slice(0, 4), slice(4, 8)):  # the reference runs 4 rows at a time
        fields = {f.name: getattr(r, f.name)[half] for f in dataclasses.fields(r)}
        assert_logps_match_teacher_forcing(ref, nnx.state(model), Rollout(**fields))


def test_blockwise_decoding_sampler_matches_teacher_forcing(model, ref):  # noqa: F811
    blockwise = with_execution(model, attention="blockwise", attention_block=8)
    assert cache_slots(blockwise.config, 16, N_NEW) == 24  # 3 whole blocks
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW)
    r = Sampler(blockwise).sample(PROMPTS4, params, jax.random.key(4))
    assert_logps_match_teacher_forcing(ref, nnx.state(model), r)
    greedy = Sampler(blockwise).sample(PROMPTS4, GREEDY, jax.random.key(0))
    dense = Sampler(model).sample(PROMPTS4, GREEDY, jax.random.key(0))
    np.testing.assert_array_equal(greedy.tokens, dense.tokens)  # same tokens, logps to rounding
    np.testing.assert_allclose(greedy.logps, dense.logps, atol=1e-5)


def test_bf16_cache_tracks_teacher_forcing(model, ref):  # noqa: F811
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW)
    r = Sampler(model, cache_dtype="bfloat16").sample(PROMPTS4, params, jax.random.key(5))
    # Keys and values are rounded to bf16 (8 mantissa bits): log-probs move by ~1e-2.
    assert_logps_match_teacher_forcing(ref, nnx.state(model), r, atol=0.05)


def test_bad_cache_options(model):  # noqa: F811
    with pytest.raises(ValueError, match="cache_dtype='int8'"):
        Sampler(model, cache_dtype="int8")
    with pytest.raises(ValueError, match="cache_bytes must be positive"):
        Sampler(model, cache_bytes=0)
