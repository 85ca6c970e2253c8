"""The Pallas paged-attention kernel equals the pure-JAX one, run in Pallas TPU interpret mode.

Oracles: `paged_attention` on the same pages (shuffled page ids, a page shared by
two rows, rows of different lengths, an idle row, NULL_PAGE padding), a
hand-computed case, and the kernel itself on a store whose unread pages are NaN.
Every interpreted shape costs seconds to trace, so the cases share a few shapes.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.experimental.pallas import tpu as pltpu

from rlvr_jax.models.paged_attention import NULL_PAGE, PagedKV, paged_attention
from rlvr_jax.models.paged_attention_pallas import paged_attention_pallas

TOL = 1e-5
BF16_TOL = 2e-2  # bf16 scores and weights, rounded at different points by the two kernels
K, H, Z, M, P = 2, 128, 8, 5, 24  # kv heads, head dim, page size, table width, store pages
LENGTHS = np.array([21, 9, 0, 33, 14], np.int32)  # row 2 is idle
OFFSETS = {  # q_offset per T: row 3's chunk ends before its length; row 4's runs past it
    1: np.array([20, 8, 0, 32, 13], np.int32),
    3: np.array([18, 6, 0, 20, 13], np.int32),
}

_pallas = jax.jit(
    functools.partial(paged_attention_pallas, interpret=True), static_argnames="block_pages"
)
_jax = jax.jit(paged_attention, static_argnames="block_pages")


def _store(seed, dtype=np.float32):
    """Random pages (every slot finite) in shuffled ids; row 1 shares row 0's first page.

    Returns:
      k_pages, v_pages, table_BxM (NULL_PAGE padded), and the ids of pages no query
      reads: the null page, pages no row holds, and a spare page past row 0's length.
    """
    rng = np.random.default_rng(seed)
    k_pages = rng.normal(size=(P, K, H, Z)).astype(dtype)
    v_pages = rng.normal(size=(P, K, Z, H)).astype(dtype)
    table = np.full((len(LENGTHS), M), NULL_PAGE, np.int32)
    fresh = iter(rng.permutation(np.arange(1, P)))
    for row, length in enumerate(LENGTHS):
        for i in range(-(-length // Z)):
            table[row, i] = table[0, 0] if (row, i) == (1, 0) else next(fresh)
    table[0, 3] = spare = next(fresh)  # allocated ahead for row 0's next tokens
    unread = np.setdiff1d(np.arange(P), np.setdiff1d(table, [NULL_PAGE, spare]))
    return k_pages, v_pages, table, unread


def _queries(seed, t, g, dtype=np.float32):
    return np.random.default_rng(seed).normal(size=(len(LENGTHS), t, K * g, H)).astype(dtype)


@pytest.mark.parametrize(
    "t, g, block_pages",
    [(1, 1, 1), (1, 2, 2), (3, 2, 3), (3, 1, 8)],  # decode, chunks; GQA 1 and 2; partial blocks
)
def test_equals_jax_kernel(t, g, block_pages):
    k_pages, v_pages, table, _ = _store(0)
    q = _queries(1, t, g)
    args = (q, k_pages, v_pages, table, OFFSETS[t], LENGTHS)
    out = np.asarray(_pallas(*args, block_pages=block_pages))
    ref = np.asarray(_jax(*args, block_pages=2))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=TOL, rtol=0)
    assert np.all(out[2] == 0)  # the idle row
    assert np.abs(out[[0, 1, 3, 4]]).max(axis=-1).min() > 0.01  # every other query attended


def test_never_reads_unseen_pages():
    """NaN in the null page, unheld pages and a page past row 0's length: the same output."""
    k_pages, v_pages, table, unread = _store(0)
    q = _queries(1, 3, 2)
    clean = np.asarray(_pallas(q, k_pages, v_pages, table, OFFSETS[3], LENGTHS, block_pages=3))
    k_pages[unread], v_pages[unread] = np.nan, np.nan
    out = np.asarray(_pallas(q, k_pages, v_pages, table, OFFSETS[3], LENGTHS, block_pages=3))
    np.testing.assert_array_equal(out, clean)


def test_bf16_tracks_jax_kernel():
    k_pages, v_pages, table, _ = _store(2)
    q = _queries(3, 3, 2)
    bf = [jnp.asarray(x, jnp.bfloat16) for x in (q, k_pages, v_pages)]
    out = _pallas(*bf, table, OFFSETS[3], LENGTHS, block_pages=2)
    assert out.dtype == jnp.bfloat16
    ref = _jax(*bf, table, OFFSETS[3], LENGTHS, block_pages=2)
    out32 = np.asarray(out, np.float32)
    assert np.abs(out32 - np.asarray(ref, np.float32)).max() <= BF16_TOL
    f32 = _jax(*(np.asarray(x, np.float32) for x in bf), table, OFFSETS[3], LENGTHS, block_pages=2)
    assert np.abs(out32 - np.asarray(f32)).max() <= BF16_TOL  # f32 math on the same inputs
    assert np.all(np.asarray(out)[2] == 0)


def test_hand_computed_case():
    """One kv head, two query heads, slots 0..7 in page 2 and slot 8 in page 1.

    Head 0's query scores slot 8 at ln 3 and the rest at 0; head 1's scores all 0.
    Values v[s] = (s, 1, 0, ...). Query at slot 7: both heads average 0..7 = 3.5.
    Query at slot 8: head 0 weighs slot 8 by 3 -> (28 + 3·8) / 11; head 1 -> 36 / 9.
    """
    k_pages = np.zeros((3, 1, H, Z), np.float32)
    v_pages = np.zeros((3, 1, Z, H), np.float32)
    k_pages[1, 0, 0, 0] = np.log(3.0) * np.sqrt(H)  # slot 8
    v_pages[2, 0, :, 0], v_pages[1, 0, 0, 0] = np.arange(8), 8.0
    v_pages[2, 0, :, 1], v_pages[1, 0, 0, 1] = 1.0, 1.0
    v_pages[1, 0, 1:] = 100.0  # slots 9.. are past the length
    q = np.zeros((1, 2, 2, H), np.float32)
    q[0, :, 0, 0] = 1.0
    table = np.array([[2, 1, NULL_PAGE]], np.int32)
    out = _pallas(q, k_pages, v_pages, table, np.array([7]), np.array([9]), block_pages=1)
    out = np.asarray(out)[0]  # [T, N, H]
    np.testing.assert_allclose(out[:, :, 0], [[3.5, 3.5], [52 / 11, 4.0]], atol=TOL)
    np.testing.assert_allclose(out[:, :, 1], 1.0, atol=TOL)
    assert np.all(out[:, :, 2:] == 0)


def test_paged_kv_pallas_path_equals_jax_path():
    """PagedKV(kernel="pallas") writes then attends like kernel="jax" (bf16 store, f32 q)."""
    k_pages, v_pages, table, _ = _store(4, np.float32)
    rng = np.random.default_rng(5)
    t = 3
    q = _queries(6, t, 2)
    k_new = rng.normal(size=(len(LENGTHS), K, H, t)).astype(np.float32)
    v_new = rng.normal(size=(len(LENGTHS), K, t, H)).astype(np.float32)
    n_new = np.array([3, 3, 0, 2, 1], np.int32)
    q_offset = LENGTHS - n_new

    @jax.jit
    def attend(kv, q, k, v):
        return kv.write_and_attend(q, k, v)

    def run(kernel):
        kv = PagedKV(
            jnp.asarray(k_pages, jnp.bfloat16),
            jnp.asarray(v_pages, jnp.bfloat16),
            jnp.asarray(table),
            jnp.asarray(q_offset),
            jnp.asarray(n_new),
            block_pages=2,
            kernel=kernel,
        )
        return attend(kv, q, k_new, v_new)

    with pltpu.force_tpu_interpret_mode():
        out, _ = run("pallas")
    ref, _ = run("jax")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=TOL, rtol=0)
    assert np.all(np.asarray(out)[2] == 0)
    with pytest.raises(ValueError, match="'triton'"):
        run("triton")


def test_lowers_for_tpu():
    """The kernel lowers through Pallas-to-Mosaic for TPU (Mosaic compiles it on the TPU)."""
    shapes = [
        ((4, 2, 4, H), jnp.bfloat16),
        ((P, K, H, 16), jnp.bfloat16),
        ((P, K, 16, H), jnp.bfloat16),
        ((4, M), jnp.int32),
        ((4,), jnp.int32),
        ((4,), jnp.int32),
    ]
    fn = jax.jit(functools.partial(paged_attention_pallas, block_pages=2))
    exported = export.export(fn, platforms=["tpu"])(
        *(jax.ShapeDtypeStruct(s, d) for s, d in shapes)
    )
    assert "tpu_custom_call" in exported.mlir_module()


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, table_shape, match",
    [
        ((2, 1, 4, 64), (P, K, 64, Z), (P, K, Z, 64), (2, M), "H=64"),
        ((2, 1, 4, H), (P, K, H, 4), (P, K, 4, H), (2, M), "Z=4"),
        ((2, 1, 3, H), (P, K, H, Z), (P, K, Z, H), (2, M), "3 query heads"),
        ((2, 1, 4, H), (P, K, H, Z), (P, K, H, Z), (2, M), "PxKxZxH"),
        ((2, 1, 4, H), (P, K, H, Z), (P, K, Z, H), (3, M), "B=2"),
        ((2, 1, 4, H), (P, K, 64, Z), (P, K, Z, 64), (2, M), "head dim 64"),
    ],
)
def test_bad_shapes_raise(q_shape, k_shape, v_shape, table_shape, match):
    zeros = [np.zeros(s, np.float32) for s in (q_shape, k_shape, v_shape)]
    table = np.zeros(table_shape, np.int32)
    length = np.zeros(q_shape[0], np.int32)
    with pytest.raises(ValueError, match=match):
        paged_attention_pallas(*zeros, table, length, length, interpret=True)


def test_bad_block_pages_raises():
    q, k_pages, v_pages = (np.zeros(s) for s in ((2, 1, 4, H), (P, K, H, Z), (P, K, Z, H)))
    length = np.zeros(2, np.int32)
    with pytest.raises(ValueError, match="block_pages=0"):
        paged_attention_pallas(
            q, k_pages, v_pages, np.zeros((2, M), np.int32), length, length, block_pages=0
        )
