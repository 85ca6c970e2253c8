"""The paged-vs-dense rows-in-flight plan (`rlvr_jax.plan_engine`), on a tiny model."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.models.tiny import tiny_config
from rlvr_jax.plan import Memory
from rlvr_jax.plan_engine import _compile_engine, engine_memory_plan, longtail_held_tokens
from rlvr_jax.sampling.pages import page_bytes

CFG = tiny_config().replace(param_dtype="bfloat16", dtype="bfloat16")


def _decode(pages: int, dtype) -> Memory:
    return Memory.of(_compile_engine(
        CFG, store_pages=pages, page_size=16, slots=8, table_width=8, prefill_rows=8,
        chunk=16, block_pages=2, program="decode", store_dtype=dtype,
    ))  # fmt: skip


def test_f32_store_is_written_in_place_and_bf16_is_not_on_cpu():
    """The plan's premise: an f32 store's temp does not grow with the store (in-place
    scatter); a bf16 one's does on the CPU backend (written through an f32 copy)."""
    small, big = _decode(65, jnp.float32), _decode(4001, jnp.float32)
    store_growth = (4001 - 65) * page_bytes(16, CFG.num_layers, CFG.num_kv_heads, CFG.head_dim, 4)
    assert big.temp == pytest.approx(small.temp, abs=1 << 16)
    assert big.argument - small.argument == pytest.approx(store_growth, rel=1e-6)
    assert big.alias - small.alias == pytest.approx(store_growth, rel=1e-6)
    bf_small, bf_big = _decode(65, jnp.bfloat16), _decode(4001, jnp.bfloat16)
    assert bf_big.temp - bf_small.temp >= 0.99 * store_growth  # the f32 copy: 2x bf16 store


def test_held_tokens_of_the_long_tail():
    n = 4096
    held = longtail_held_tokens(n)
    # Independent check: the same lognormal by the closed form of the uncapped moments,
    # E[L^2] / 2E[L] = median * exp(1.5 sigma^2) / 2; the cap at p99 can only lower it.
    sigma = np.log(8.0) / 2.326
    uncapped = n / 8 * np.exp(1.5 * sigma**2) / 2
    assert 0.7 * uncapped < held < uncapped
    assert held < n / 2  # a row at its max holds N/2 on average; the tail holds less
    assert longtail_held_tokens(n, seed=1) == pytest.approx(held, rel=0.02)


@pytest.mark.slow
def test_plan_fits_its_budget_and_orders_its_rows():
    plan = engine_memory_plan(CFG, hbm_bytes=0.2e9, prompt_len=32, max_new_tokens=256,
                              group=8, page_size=16, layers=None)  # fmt: skip
    budget = plan.budget_bytes
    assert max(plan.decode.peak, plan.prefill.peak) <= budget * 1.001
    assert plan.dense_peak.peak <= budget
    # Each dense row holds at least its KV cache of P + N slots.
    assert plan.dense_row_bytes >= (32 + 256) * plan.token_bytes
    assert plan.capacity_tokens == plan.pages * 16
    assert 1 <= plan.paged_rows_full <= plan.paged_rows_longtail <= plan.slots
    # The paged store is most of what the weights and programs leave.
    assert plan.pages * 16 * plan.token_bytes > 0.5 * (budget - plan.weights_bytes)
