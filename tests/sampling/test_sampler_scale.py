"""Sampler options for large batches: row chunks from a memory budget, a bf16 cache,
blockwise decode.

Oracles: hand-counted bytes (KV cache and per-row working memory), the unchunked
sampler (greedy rollouts are deterministic, so chunking must not change them; a
sampled chunk draws as one call with `fold_in(key, call)`) and teacher forcing of
the same model (`token_logps`).
"""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models.transformer import with_execution
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams
from rlvr_jax.sampling.generate import cache_slots, kv_cache_bytes, work_bytes_per_row
from tests.sampling.test_sampler import (  # noqa: F401 (fixtures)
    BUCKET,
    CFG,
    GREEDY,
    N_NEW,
    PROMPTS4,
    assert_logps_match_teacher_forcing,
    assert_same_rollout,
    model,
    ref,
)

SLOTS = BUCKET + N_NEW
KV_BYTES = kv_cache_bytes(CFG, 1, SLOTS)
# Per row of a call: its KV cache plus its working memory (what `cache_bytes` budgets).
ROW_BYTES = KV_BYTES + work_bytes_per_row(CFG, BUCKET, N_NEW)


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    c = CFG
    want = 3 * 40 * 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    assert kv_cache_bytes(c, 3, 40) == want
    assert kv_cache_bytes(c, 3, 40, "bfloat16") == want // 2


def test_work_bytes_per_row_counts_prefill_decode_and_outputs():
    c = CFG  # I = 128, D = 64, V = 128
    prefill = BUCKET * (5 * 4 * c.intermediate_size + 4 * c.hidden_size)  # 16 x 2816
    decode = 8 * 4 * c.vocab_size  # 8 f32 [V] buffers
    outputs = 2 * N_NEW * (4 + 1 + 3 * 4)  # int32, bool and 3 f32 [N], in and out of the loop
    assert (prefill, decode, outputs) == (45056, 4096, 272)
    assert work_bytes_per_row(c, BUCKET, N_NEW) == 49424
    # The prefill term grows with P, not with N.
    assert work_bytes_per_row(c, 2 * BUCKET, N_NEW) - work_bytes_per_row(c, BUCKET, N_NEW) == (
        prefill
    )


@pytest.mark.parametrize("k", [1, 3, 7])
def test_a_budget_of_exactly_k_rows_gives_k(model, k):  # noqa: F811
    exact = Sampler(model, cache_bytes=k * ROW_BYTES, batch_multiple=1)
    assert exact.rows_per_call(k, BUCKET, N_NEW) == k
    assert exact.rows_per_call(100, BUCKET, N_NEW) <= k
    if k > 1:  # one byte less holds k - 1 rows (k rows then take two calls)
        short = Sampler(model, cache_bytes=k * ROW_BYTES - 1, batch_multiple=1)
        assert short.rows_per_call(k - 1, BUCKET, N_NEW) == k - 1
        assert short.rows_per_call(k, BUCKET, N_NEW) == -(-k // 2)
    # The KV cache alone would let k rows fit a smaller budget: the work term is counted.
    kv_only = Sampler(model, cache_bytes=k * KV_BYTES, batch_multiple=1)
    assert k * KV_BYTES < k * ROW_BYTES
    if k * KV_BYTES >= ROW_BYTES:
        assert kv_only.rows_per_call(k, BUCKET, N_NEW) == k * KV_BYTES // ROW_BYTES


@pytest.mark.parametrize(
    "rows,budget_rows,want",
    [(4, None, 8), (20, None, 24), (20, 8, 8), (20, 17, 16), (40, 16, 16), (40, 24, 24)],
)
def test_rows_per_call_fits_the_budget_and_evens_out(model, rows, budget_rows, want):  # noqa: F811
    budget = None if budget_rows is None else budget_rows * ROW_BYTES
    sampler = Sampler(model, cache_bytes=budget)
    got = sampler.rows_per_call(rows, BUCKET, N_NEW)
    assert got == want and got % 8 == 0
    if budget is not None:
        assert got * ROW_BYTES <= budget


def test_a_budget_below_one_call_is_an_error_naming_the_config_field(model):  # noqa: F811
    sampler = Sampler(model, cache_bytes=7 * ROW_BYTES)  # batch_multiple = 8
    with pytest.raises(ValueError, match=r"rollout.cache_gib.* holds 0 rows of P \+ N = 16 \+ 8"):
        sampler.rows_per_call(4, BUCKET, N_NEW)
    one = Sampler(model, cache_bytes=ROW_BYTES - 1, batch_multiple=1)  # not even one row
    with pytest.raises(ValueError, match="holds 0 rows"):
        one.rows_per_call(1, BUCKET, N_NEW)


def test_chunked_greedy_sampling_equals_one_call(model, ref):  # noqa: F811
    prompts = PROMPTS4 * 5  # 20 rows: three calls of 8 under a budget of 8 rows
    one = Sampler(model).sample(prompts, GREEDY, jax.random.key(0))
    sampler = Sampler(model, cache_bytes=8 * ROW_BYTES, batch_multiple=4)
    assert sampler.rows_per_call(20, BUCKET, N_NEW) == 8
    chunked = sampler.sample(prompts, GREEDY, jax.random.key(0))
    assert_same_rollout(one, chunked)


def test_each_sampled_chunk_draws_as_one_call_with_the_folded_key(model):  # noqa: F811
    """Temperature 1: call c's rows are what one call of those rows draws with fold_in(key, c)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW)
    prompts = PROMPTS4 + PROMPTS4[::-1]  # 8 rows: two calls of 4
    key = jax.random.key(7)
    chunked = Sampler(model, cache_bytes=4 * ROW_BYTES, batch_multiple=4)
    assert chunked.rows_per_call(8, BUCKET, N_NEW) == 4
    r = chunked.sample(prompts, params, key)
    whole = Sampler(model, batch_multiple=4)
    for call, rows in enumerate((slice(0, 4), slice(4, 8))):
        want = whole.sample(prompts[rows], params, jax.random.fold_in(key, call))
        for f in dataclasses.fields(Rollout):
            if f.name == "group":  # group ids count from the first prompt of the batch
                continue
            got = getattr(r, f.name)[rows]
            np.testing.assert_array_equal(got, getattr(want, f.name), err_msg=f.name)


def test_with_model_keeps_the_budget_and_dtype(model):  # noqa: F811
    """A sampler for another model (LSPO's LoRA copy) splits rows and stores the cache alike."""
    bf16_row = KV_BYTES // 2 + (ROW_BYTES - KV_BYTES)  # the cache halves, the work does not
    budget = 12 * bf16_row
    base = Sampler(model, cache_bytes=budget, batch_multiple=4, cache_dtype="bfloat16")
    other = base.with_model(model)
    assert other is not base and other.model is model
    for attr in ("pad_id", "max_length", "batch_multiple", "mesh", "rules"):
        assert getattr(other, attr) == getattr(base, attr), attr
    assert (other.cache_bytes, other.cache_dtype) == (budget, "bfloat16")
    # The budget holds 12 rows with a bf16 cache, 10 (so calls of 8) with an f32 one.
    assert other.rows_per_call(20, BUCKET, N_NEW) == base.rows_per_call(20, BUCKET, N_NEW) == 12
    f32 = Sampler(model, cache_bytes=budget, batch_multiple=4)
    assert budget // ROW_BYTES == 10 and f32.rows_per_call(20, BUCKET, N_NEW) == 8


def test_chunked_sampling_logps_match_teacher_forcing(model, ref):  # noqa: F811
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    sampler = Sampler(model, cache_bytes=4 * ROW_BYTES, batch_multiple=4)
    r = sampler.sample(PROMPTS4, params, jax.random.key(3))  # 8 rows: two calls
    assert sampler.rows_per_call(8, BUCKET, N_NEW) == 4
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
