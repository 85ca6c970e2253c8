"""Paged attention's decode step by softmax block size, against dense attention over a cache.

  taskset -c 0 python scripts/bench_paged_attention.py
  taskset -c 0 python scripts/bench_paged_attention.py --rows 32 --lengths 100,700

One layer's decode attention (T = 1) of `rows` rows, 8 query / 4 kv heads of 64, pages
of 16 slots, every row holding `length` tokens in 48 pages of its own; the jitted
`models.paged_attention.paged_attention` at each `block_pages`, and a dense
softmax(q·K)·V over the same rows' [rows, 4, 64, 768] cache (all 768 slots, masked),
the static sampler's layout. Median of 10 calls after a warm-up, milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.models.paged_attention import paged_attention

K, G, H, Z, M = 4, 2, 64, 16, 48


def median_ms(fn, *args, repeats=10) -> float:
    fn(*args).block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--lengths", default="100,300,700")
    ap.add_argument("--blocks", default="1,2,4,8")
    args = ap.parse_args()
    b = args.rows
    rng = np.random.RandomState(0)
    k_pages = jnp.asarray(rng.randn(b * M + 1, K, H, Z).astype(np.float32))
    v_pages = jnp.asarray(rng.randn(b * M + 1, K, Z, H).astype(np.float32))
    table = jnp.asarray((1 + np.arange(b * M)).reshape(b, M).astype(np.int32))
    q = jnp.asarray(rng.randn(b, 1, K * G, H).astype(np.float32))
    s = M * Z
    k_dense = jnp.asarray(rng.randn(b, K, H, s).astype(np.float32))
    v_dense = jnp.asarray(rng.randn(b, K, s, H).astype(np.float32))

    @jax.jit
    def dense(q, k, v, length):
        scores = jnp.matmul(q.reshape(b, K, G, H), k) * H**-0.5
        scores = jnp.where(jnp.arange(s) < length, scores, -1e30)
        return jnp.matmul(jax.nn.softmax(scores, -1), v)

    blocks = [int(x) for x in args.blocks.split(",")]
    print(f"{b} rows, pages of {Z}, {M} pages per row; ms per call (median of 10)\n")
    print("| cached tokens | " + " | ".join(f"paged, {c} pages/block" for c in blocks)
          + " | dense (768 slots) |")  # fmt: skip
    print("|---" * (len(blocks) + 2) + "|")
    for length in (int(x) for x in args.lengths.split(",")):
        off, kv_len = jnp.full((b,), length - 1, jnp.int32), jnp.full((b,), length, jnp.int32)
        cells = []
        for c in blocks:
            fn = jax.jit(lambda *a, c=c: paged_attention(*a, block_pages=c))
            cells.append(median_ms(fn, q, k_pages, v_pages, table, off, kv_len))
        cells.append(median_ms(dense, q, k_dense, v_dense, length))
        print(f"| {length} | " + " | ".join(f"{x:.1f}" for x in cells) + " |")


if __name__ == "__main__":
    main()
