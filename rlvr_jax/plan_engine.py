"""Rows in flight on one chip: the paged engine's page pool against the static sampler's cache.

A rollout replica on one chip holds the policy's weights and, for its rows, a KV
cache. The static sampler (`Sampler`, engine "static") gives every row of a call
P + N slots for the whole call, so its rows per chip are what fits at the longest
length. The paged engine (`sampling.engine`) holds, per row, pages for the tokens
it has so far, and a group's prompt pages once; so its rows in flight depend on
the response lengths. `engine_memory_plan` measures both from compiled programs
(abstract shapes, nothing allocated; XLA's per-device `memory_analysis`, as
`rlvr_jax.plan` does for the train step):

  dense   the static sampler's prefill + decode program compiled for R1 and R2
          rows (bf16 KV cache of P + N slots); its peak is linear in the rows, so
          dense rows = the largest R whose peak fits the budget.
  paged   the engine's decode step (S slots) and prefill chunk (R lanes of C
          tokens) compiled with a small page store, whose temp and code do not
          depend on the store; the store then takes what the budget leaves after
          the weights and the larger program's temp and code, and both programs
          are compiled again with that store to check that their temp did not grow.
          The CPU backend has no bf16 scatter: it writes a bf16 store through an f32
          copy of it (temp = 2x the store, measured), which a TPU does not do.

Both sides are compiled in f32 (weights, activations, caches) and counted with bf16
weights and caches: the CPU backend upcasts bf16 operands to f32 (a bf16 Qwen3-8B's
decode step had 26 GiB of temp, an f32 copy of its layers' weights; the bf16 page store
is written through an f32 copy), which a TPU does not. An f32 store is updated in place
(the temp does not grow with it, measured), so the plans subtract the f32-over-bf16
bytes of the weights (arguments) and of the caches (the engine's store argument; the
static sampler's cache, in its temp), and keep the f32 activations: an upper bound.

Rows in flight from the paged pool's token capacity K (pages x page size):
  every response at N   K / (P/G + N): each row's pages at its end, prompt pages
                        shared by the G samples of a group. With this many rows the
                        engine never preempts.
  long tail             K / (P/G + E[L^2] / (2 E[L])) for response lengths L drawn
                        as scripts/bench_rollout.py's long tail (lognormal, p99 = 8 x
                        median, capped) with its p99 at N: under continuous batching a
                        row in flight is met with probability proportional to its
                        length L, at a progress uniform in [0, L]. An estimate of the
                        steady state, not a simulation; the decode slots S are sized to
                        hold that many rows.
Like `rlvr_jax.plan`, programs are compiled at two depths and extrapolated
linearly in the layer count, and the CPU backend's buffer assignment stands in
for the TPU's: keep the margin.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.paged_forward import PagedKVCache
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.plan import GIB, Memory, _at_full_depth, _compile_sample, _depths
from rlvr_jax.sampling import engine_step
from rlvr_jax.sampling.engine import _pow2
from rlvr_jax.sampling.generate import MAX_STOP_IDS
from rlvr_jax.sampling.pages import page_bytes

P99_OVER_MEDIAN = 8.0  # scripts/bench_rollout.py's long tail
_SIGMA = float(np.log(P99_OVER_MEDIAN) / 2.326)


def longtail_held_tokens(max_new_tokens: int, samples: int = 200_000, seed: int = 0) -> float:
    """E[L^2] / (2 E[L]) for L ~ the bench's lognormal long tail with p99 = N, capped at N.

    The mean response tokens a row holds at a random moment of a continuous batch
    (see the module docstring); seeded Monte Carlo over `samples` lengths.
    """
    median = max_new_tokens / P99_OVER_MEDIAN
    rng = np.random.RandomState(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(median), _SIGMA, samples)), 1, max_new_tokens)
    return float(np.mean(lengths**2) / (2 * np.mean(lengths)))


@dataclasses.dataclass(frozen=True)
class EnginePlan:
    """One length's plan; byte counts are per chip."""

    model: ModelConfig
    budget_bytes: float  # HBM x (1 - margin)
    prompt_len: int  # P
    max_new_tokens: int  # N
    group: int  # G, samples sharing a prompt
    page_size: int  # Z
    slots: int  # S, decode slots of the engine
    prefill_rows: int  # R
    prefill_chunk: int  # C
    compiled_layers: tuple[int, ...]
    weights_bytes: float
    dense_rows: int  # static sampler rows that fit
    dense_row_bytes: float  # its peak's growth per row
    dense_peak: Memory  # compiled at dense_rows
    pages: int  # usable pages of the paged store
    decode: Memory  # engine decode step with that store
    prefill: Memory  # engine prefill chunk with that store
    held_longtail: float  # E[L^2] / 2E[L]

    @property
    def token_bytes(self) -> float:
        return page_bytes(1, self.model.num_layers, self.model.num_kv_heads,
                          self.model.head_dim, 2)  # fmt: skip

    @property
    def capacity_tokens(self) -> int:
        return self.pages * self.page_size

    @property
    def paged_rows_full(self) -> int:
        """Rows whose every response reaches N (no preemption at this count)."""
        rows = int(self.capacity_tokens // (self.prompt_len / self.group + self.max_new_tokens))
        return min(rows, self.slots)

    @property
    def paged_rows_longtail(self) -> int:
        rows = int(self.capacity_tokens // (self.prompt_len / self.group + self.held_longtail))
        return min(rows, self.slots)

    def row(self) -> dict:
        """The numbers of one table row."""
        return {
            "N": self.max_new_tokens,
            "dense_rows": self.dense_rows,
            "dense_peak_gib": self.dense_peak.peak / GIB,
            "paged_capacity_tokens": self.capacity_tokens,
            "paged_rows_full": self.paged_rows_full,
            "paged_rows_longtail": self.paged_rows_longtail,
            "held_longtail": self.held_longtail,
            "slots": self.slots,
            "paged_peak_gib": max(self.decode.peak, self.prefill.peak) / GIB,
            "decode_temp_gib": self.decode.temp / GIB,
            "prefill_temp_gib": self.prefill.temp / GIB,
        }


def _abstract_split(config: ModelConfig):
    model = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    return nnx.split(model)


def _compile_engine(config, *, store_pages, page_size, slots, table_width, prefill_rows,
                    chunk, block_pages, program, store_dtype=jnp.float32):  # fmt: skip
    """The engine's `program` ("decode" or "prefill") compiled on abstract shapes (an f32
    store by default: see the module docstring)."""
    graphdef, state = _abstract_split(config)
    cache = jax.eval_shape(lambda: PagedKVCache.zeros(config, store_pages, page_size, store_dtype))
    i32, f32 = jnp.int32, jnp.float32
    sds = jax.ShapeDtypeStruct
    static = dict(graphdef=graphdef, block_pages=block_pages, kernel="jax")
    if program == "decode":
        s = (slots,)
        args = (state, cache, sds(s, i32), sds((slots, table_width), i32), sds(s, i32),
                sds(s, jnp.bool_), sds((2,), jnp.uint32), sds(s, i32), sds(s, i32),
                sds(s, f32), sds(s, i32), sds(s, f32), sds((slots, MAX_STOP_IDS), i32))  # fmt: skip
        return engine_step.decode.lower(*args, **static).compile()
    r = (prefill_rows,)
    args = (state, cache, sds((prefill_rows, chunk), i32),
            sds((prefill_rows, table_width), i32), sds(r, i32), sds(r, i32))  # fmt: skip
    return engine_step.prefill.lower(*args, **static).compile()


def engine_memory_plan(
    config: ModelConfig,
    *,
    hbm_bytes: float,
    prompt_len: int,
    max_new_tokens: int,
    group: int = 16,
    page_size: int = 16,
    prefill_rows: int = 64,
    prefill_chunk: int = 64,
    block_pages: int = 2,
    margin: float = 0.1,
    layers: tuple[int, int] | None = (2, 4),
    dense_rows_probe: tuple[int, int] = (2, 4),
) -> EnginePlan:
    """Rows in flight on one chip of `hbm_bytes` for the static sampler and the paged engine.

    Args:
      config: the policy (weights and both caches in bfloat16 are planned).
      hbm_bytes: memory of the chip; margin: the share kept free.
      prompt_len: P; max_new_tokens: N; group: G samples per prompt.
      page_size, prefill_rows, prefill_chunk, block_pages: the engine's Z, R, C and
        attention block (`rollout.page_size`, ...).
      layers: the two depths compiled and extrapolated from (None: every layer).
      dense_rows_probe: the two row counts the static sampler is compiled at.
    Returns:
      An EnginePlan (`row()` gives its table row).
    Raises:
      ValueError: the weights and programs leave no room for a page or a row.
    """
    # Compiled in f32 (see the module docstring), counted with bf16 weights and caches.
    config = config.replace(param_dtype="float32", dtype="float32")
    half_weights = float(config.num_params() * 2)  # f32 weights less bf16 ones
    depths = _depths(config, layers)
    budget = hbm_bytes * (1 - margin)
    length = prompt_len + max_new_tokens
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])

    kv_f32_less_bf16 = length * page_bytes(
        1, config.num_layers, config.num_kv_heads, config.head_dim, 2
    )

    def dense(rows: int) -> Memory:
        m = _at_full_depth(config, depths, lambda cfg: _compile_sample(
            cfg, mesh, "fsdp", rows, prompt_len, max_new_tokens, "float32"))  # fmt: skip
        return dataclasses.replace(m, argument=m.argument - half_weights,
                                   temp=m.temp - rows * kv_f32_less_bf16)  # fmt: skip

    def fit(lo: int, hi: int) -> tuple[int, float]:
        m_lo, m_hi = dense(lo), dense(hi)
        per_row = (m_hi.peak - m_lo.peak) / (hi - lo)
        return int((budget - (m_lo.peak - lo * per_row)) // per_row), per_row

    # Probe small, then refit between half the estimate and the estimate itself.
    dense_rows, per_row = fit(*dense_rows_probe)
    if dense_rows >= 2 * dense_rows_probe[1]:
        dense_rows, per_row = fit(dense_rows // 2, dense_rows)
    dense_peak = dense(max(dense_rows, 1))
    while dense_rows > 0 and dense_peak.peak > budget:
        dense_rows -= max(1, int((dense_peak.peak - budget) // per_row))
        dense_peak = dense(max(dense_rows, 1))
    if dense_rows < 1:
        raise ValueError(
            f"N={max_new_tokens}: not one static-sampler row fits {budget / GIB:.1f} GiB"
        )
    weights = half_weights  # bf16 bytes
    token_bytes = page_bytes(1, config.num_layers, config.num_kv_heads, config.head_dim, 2)
    held = longtail_held_tokens(max_new_tokens)
    table_width = -(-length // page_size)

    def engine(store_pages: int, slots: int) -> tuple[Memory, Memory]:
        kw = dict(store_pages=store_pages, page_size=page_size, slots=slots,
                  table_width=table_width, prefill_rows=prefill_rows, chunk=prefill_chunk,
                  block_pages=block_pages)  # fmt: skip
        return tuple(_at_full_depth(config, depths, lambda cfg, p=p: _compile_engine(
            cfg, program=p, **kw)) for p in ("decode", "prefill"))  # fmt: skip

    small = 64
    f32_token = page_bytes(1, config.num_layers, config.num_kv_heads, config.head_dim, 4)
    per_row_tokens = prompt_len / group + held

    def pages_at(slots: int) -> tuple[int, Memory, Memory]:
        dec, pre = engine(small + 1, slots)
        # weights, inputs, temp and code: the programs' peak less their (f32 stand-in) store
        fixed = max(m.peak for m in (dec, pre)) - (small + 1) * page_size * f32_token
        fixed -= half_weights
        return int((budget - fixed) // (page_size * token_bytes)) - 1, dec, pre

    # Slots: a first guess from the weights alone, then as many as the rows the pool
    # holds at the previous guess (the decode temp grows with S), until it settles.
    slots = _pow2(int((budget - weights) / token_bytes / per_row_tokens))
    for _ in range(6):
        pages, dec, pre = pages_at(slots)
        want = _pow2(int(max(pages, 1) * page_size // per_row_tokens))
        if want >= slots:
            break
        slots = want
    if pages < 1:
        raise ValueError(f"N={max_new_tokens}: the weights and programs leave no page")
    big = engine(pages + 1, slots)
    for m_small, m_big in zip((dec, pre), big, strict=True):
        if m_big.temp > m_small.temp * 1.01 + 2**20:
            raise ValueError(
                f"the engine's temp grew with the store ({m_small.temp / GIB:.2f} -> "
                f"{m_big.temp / GIB:.2f} GiB): the store is not updated in place"
            )
    # The store at bf16 in place of the f32 stand-in (arguments, outputs, aliases).
    shrink = (pages + 1) * page_size * (f32_token - token_bytes)
    dec, pre = (dataclasses.replace(m, argument=m.argument - shrink - half_weights,
                                    output=m.output - shrink,
                                    alias=m.alias - shrink) for m in big)  # fmt: skip
    peak = max(dec.peak, pre.peak)
    if peak > budget * 1.001:
        raise ValueError(
            f"paged peak {peak / GIB:.2f} GiB exceeds the budget {budget / GIB:.2f} GiB"
        )
    return EnginePlan(
        model=config, budget_bytes=budget, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
        group=group, page_size=page_size, slots=slots, prefill_rows=prefill_rows,
        prefill_chunk=prefill_chunk, compiled_layers=depths, weights_bytes=weights,
        dense_rows=dense_rows, dense_row_bytes=per_row, dense_peak=dense_peak,
        pages=pages, decode=dec, prefill=pre, held_longtail=held,
    )  # fmt: skip


def format_table(plans: list[EnginePlan], hbm_name: str) -> str:
    """The markdown table of `plans` (one per N), with its header."""
    p0 = plans[0]
    lines = [
        f"{p0.model.model_type} {p0.model.num_params() / 1e9:.2f}B, one {hbm_name} chip "
        f"({p0.budget_bytes / GIB:.1f} GiB after the margin), P = {p0.prompt_len}, "
        f"G = {p0.group}, page {p0.page_size} tokens, bf16 weights and caches; "
        f"compiled at {p0.compiled_layers} layers",
        "",
        "| N | static rows (peak GiB) | paged tokens | paged rows, every row at N | "
        "paged rows, long tail (held tokens) | decode slots | paged peak GiB | gain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in plans:
        r = p.row()
        gain = r["paged_rows_longtail"] / r["dense_rows"]
        lines.append(
            f"| {r['N']} | {r['dense_rows']} ({r['dense_peak_gib']:.1f}) | "
            f"{r['paged_capacity_tokens']:,} | {r['paged_rows_full']} | "
            f"{r['paged_rows_longtail']} ({r['held_longtail']:.0f}) | {r['slots']} | "
            f"{r['paged_peak_gib']:.1f} | {gain:.1f}x |"
        )
    return "\n".join(lines)
