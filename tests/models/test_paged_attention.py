"""Paged attention equals dense attention on the same K/V; write_kv and copy_pages place tokens.

Oracles: `attention(..., impl="xla")` on a dense cache holding the same keys and
values (pages scattered in a random permutation, a group's rows sharing their
prompt pages, rows of different lengths, garbage in every page slot no row
owns), a float64 NumPy loop over slots, and a hand-computed case.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.models.attention import attention
from rlvr_jax.models.paged_attention import NULL_PAGE, copy_pages, paged_attention, write_kv

TOL = 1e-5
Z, M, P = 4, 5, 24  # page size, table width, store pages
LENGTHS = (13, 9, 20, 1, 7)  # rows 0 and 1 share their first 2 pages (a group's prompt)


def _paged_cache(seed, lengths=LENGTHS, *, k=2, h=8, shared=((0, 1, 2),)):
    """Random per-row K/V in randomly permuted pages; (a, c, n): row c shares row a's n pages.

    Returns:
      k_pages, v_pages (f32, every unowned slot random), table_BxM (NULL_PAGE padded),
      and the dense k_BxKxHxS, v_BxKxSxH (S = M·Z) holding the same tokens.
    """
    rng = np.random.default_rng(seed)
    b, s = len(lengths), M * Z
    k_dense = rng.normal(size=(b, k, h, s)).astype(np.float32)
    v_dense = rng.normal(size=(b, k, s, h)).astype(np.float32)
    k_pages = rng.normal(size=(P, k, h, Z)).astype(np.float32)
    v_pages = rng.normal(size=(P, k, Z, h)).astype(np.float32)
    table = np.full((b, M), NULL_PAGE, np.int32)
    fresh = iter(rng.permutation(np.arange(1, P)))
    share = {c: (a, n) for a, c, n in shared}
    for row, length in enumerate(lengths):
        for i in range(-(-length // Z)):
            a, n = share.get(row, (None, 0))
            if i < n:  # the same page, so the same tokens
                table[row, i] = table[a, i]
                k_dense[row, ..., i * Z : (i + 1) * Z] = k_dense[a, ..., i * Z : (i + 1) * Z]
                v_dense[row, :, i * Z : (i + 1) * Z] = v_dense[a, :, i * Z : (i + 1) * Z]
                continue
            table[row, i] = next(fresh)
            k_pages[table[row, i]] = k_dense[row, ..., i * Z : (i + 1) * Z]
            v_pages[table[row, i]] = v_dense[row, :, i * Z : (i + 1) * Z]
    return k_pages, v_pages, table, k_dense, v_dense


def _queries(seed, b, t, n=4, h=8):
    return np.random.default_rng(seed).normal(size=(b, t, n, h)).astype(np.float32)


def _dense_rows(q, k_dense, v_dense, q_offset_B, kv_len_B):
    """Row by row (attention takes one offset per call) through the dense kernel."""
    s = k_dense.shape[-1]
    outs = []
    for b in range(q.shape[0]):
        valid = jnp.arange(s)[None] < kv_len_B[b]
        outs.append(
            attention(
                q[b : b + 1],
                k_dense[b : b + 1],
                v_dense[b : b + 1],
                valid,
                jnp.int32(q_offset_B[b]),
                impl="xla",
            )
        )
    return np.concatenate([np.asarray(o) for o in outs])


def _numpy_reference(q, k_pages, v_pages, table, q_offset_B, kv_len_B):
    """float64 loop: query t of row b over slots s < min(kv_len, q_offset + t + 1)."""
    q, k_pages, v_pages = (np.asarray(x, np.float64) for x in (q, k_pages, v_pages))
    b, t, n, h = q.shape
    groups = n // k_pages.shape[1]
    out = np.zeros_like(q)
    for row in range(b):
        for pos in range(t):
            slots = range(min(kv_len_B[row], q_offset_B[row] + pos + 1))
            if not slots:
                continue
            keys = np.stack([k_pages[table[row, s // Z], :, :, s % Z] for s in slots])
            vals = np.stack([v_pages[table[row, s // Z], :, s % Z, :] for s in slots])
            for head in range(n):
                scores = keys[:, head // groups] @ q[row, pos, head] / np.sqrt(h)
                w = np.exp(scores - scores.max())
                out[row, pos, head] = (w / w.sum()) @ vals[:, head // groups]
    return out


@pytest.mark.parametrize("block_pages", [1, 2, M])  # one page per step; padded table; one step
@pytest.mark.parametrize("t", [1, 3])  # decode; a chunk of 3 ending at each row's length
def test_equals_dense_attention(block_pages, t):
    k_pages, v_pages, table, k_dense, v_dense = _paged_cache(0)
    kv_len = np.array(LENGTHS, np.int32)
    q_offset = np.maximum(kv_len - t, 0)
    q = _queries(1, len(LENGTHS), t)
    out = jax.jit(paged_attention, static_argnames="block_pages")(
        q, k_pages, v_pages, table, q_offset, kv_len, block_pages=block_pages
    )
    ref = _dense_rows(q, k_dense, v_dense, q_offset, kv_len)
    sees = (q_offset[:, None] + np.arange(t)) >= 0  # every query sees slot 0 here
    assert np.abs(np.asarray(out) - ref)[sees].max() <= TOL


def test_equals_numpy_reference_with_idle_and_ragged_rows():
    """An idle row (length 0, all-null table) gives zeros; chunk queries past a row's length
    see only its valid slots."""
    lengths = (13, 9, 20, 0, 7)
    k_pages, v_pages, table, _, _ = _paged_cache(2, lengths)
    kv_len = np.array(lengths, np.int32)
    q_offset = np.array([10, 6, 0, 0, 5], np.int32)  # row 4: queries at 5..8, length 7
    q = _queries(3, len(lengths), 4)
    out = np.asarray(paged_attention(q, k_pages, v_pages, table, q_offset, kv_len, block_pages=2))
    ref = _numpy_reference(q, k_pages, v_pages, table, q_offset, kv_len)
    np.testing.assert_allclose(out, ref, atol=TOL)
    assert np.all(out[3] == 0)


def test_bf16_inputs_track_f32():
    k_pages, v_pages, table, _, _ = _paged_cache(4)
    kv_len = np.array(LENGTHS, np.int32)
    q = _queries(5, len(LENGTHS), 2)
    bf = [jnp.asarray(x, jnp.bfloat16) for x in (q, k_pages, v_pages)]
    q_offset = np.maximum(kv_len - 2, 0)
    out = paged_attention(*bf, table, q_offset, kv_len, block_pages=2)
    assert out.dtype == jnp.bfloat16
    ref = _numpy_reference(q, k_pages, v_pages, table, q_offset, kv_len)
    err = np.abs(np.asarray(out.astype(jnp.float32)) - ref).max()
    assert err < 0.05


def test_hand_computed_case():
    """One head, H = 1, Z = 1, pages in reverse order: scores 0 and ln 3 -> weights 1/4, 3/4."""
    k_pages = np.zeros((3, 1, 1, 1), np.float32)
    v_pages = np.zeros((3, 1, 1, 1), np.float32)
    k_pages[2, 0, 0, 0], k_pages[1, 0, 0, 0] = 0.0, np.log(3.0)  # slot 0 in page 2, slot 1 in 1
    v_pages[2, 0, 0, 0], v_pages[1, 0, 0, 0] = 4.0, 8.0
    q = np.ones((1, 2, 1, 1), np.float32)  # queries at slots 0 and 1
    out = paged_attention(
        q,
        k_pages,
        v_pages,
        np.array([[2, 1]], np.int32),
        np.array([0]),
        np.array([2]),
        block_pages=1,
    )
    np.testing.assert_allclose(np.asarray(out)[0, :, 0, 0], [4.0, 0.25 * 4 + 0.75 * 8], atol=TOL)


def test_never_reads_pages_past_the_last_visible_slot():
    """Table entries past every row's last visible page (block_pages = 1) hold NaN pages."""
    k_pages, v_pages, table, _, _ = _paged_cache(6, (8, 5, 7), shared=())
    poison = np.setdiff1d(np.arange(1, P), table[:, :2])[0]  # a page no row holds
    table[:, 2:] = poison
    k_pages[poison], v_pages[poison] = np.nan, np.nan
    kv_len = np.array([8, 5, 7], np.int32)
    q = _queries(7, 3, 1)
    out = np.asarray(paged_attention(q, k_pages, v_pages, table, kv_len - 1, kv_len, block_pages=1))
    assert np.isfinite(out).all()
    ref = _numpy_reference(q, k_pages, v_pages, table, kv_len - 1, kv_len)
    np.testing.assert_allclose(out, ref, atol=TOL)


def test_write_kv_then_attention_equals_dense():
    """A prefill chunk (ragged rows) then 3 decode steps written into an empty store, an idle
    row writing to the null page: the store reads back every token and attention equals the
    dense kernel on the same K/V; pages no row owns are untouched."""
    rng = np.random.default_rng(8)
    k, h, prompt, steps = 2, 8, (6, 3, 9), 3
    b = len(prompt) + 1  # the last row is idle
    s = max(prompt) + steps
    k_dense = rng.normal(size=(b, k, h, s)).astype(np.float32)
    v_dense = rng.normal(size=(b, k, s, h)).astype(np.float32)
    table = np.full((b, M), NULL_PAGE, np.int32)
    ids = rng.permutation(np.arange(1, P))
    for row, n in enumerate(prompt):  # pages for prompt + steps tokens, in random order
        need = -(-(n + steps) // Z)
        table[row, :need], ids = ids[:need], ids[need:]
    k_pages, v_pages = jnp.zeros((P, k, h, Z)), jnp.zeros((P, k, Z, h))
    write = jax.jit(write_kv)
    # Prefill: every row writes max(prompt) tokens from slot 0; the tails past a row's prompt
    # land in its own later slots (overwritten below) or, for the idle row, the null page.
    t = max(prompt)
    zeros = np.zeros(b, np.int32)
    k_pages, v_pages = write(k_pages, v_pages, table, zeros, k_dense[..., :t], v_dense[:, :, :t])
    lengths = np.array(prompt + (0,), np.int32)
    for _ in range(steps):
        idx = np.minimum(lengths, s - 1)
        k_new = np.take_along_axis(k_dense, idx[:, None, None, None], axis=3)
        v_new = np.take_along_axis(v_dense, idx[:, None, None, None], axis=2)
        k_pages, v_pages = write(k_pages, v_pages, table, lengths, k_new, v_new)
        lengths[:-1] += 1
    kp, vp = np.asarray(k_pages), np.asarray(v_pages)
    for row in range(b - 1):
        for slot in range(lengths[row]):
            page, off = table[row, slot // Z], slot % Z
            np.testing.assert_array_equal(kp[page, :, :, off], k_dense[row, :, :, slot])
            np.testing.assert_array_equal(vp[page, :, off, :], v_dense[row, :, slot, :])
    unowned = np.setdiff1d(np.arange(P), np.append(table.ravel(), NULL_PAGE))
    assert np.all(kp[unowned] == 0) and np.all(vp[unowned] == 0)
    q = _queries(9, b, 1)
    out = np.asarray(paged_attention(q, kp, vp, table, lengths - 1, lengths, block_pages=2))
    ref = _dense_rows(q, k_dense, v_dense, lengths - 1, lengths)
    assert np.abs(out[:-1] - ref[:-1]).max() <= TOL
    assert np.all(out[-1] == 0)


def test_write_past_the_table_goes_to_the_null_page():
    k_pages, v_pages = jnp.zeros((4, 1, 2, Z)), jnp.zeros((4, 1, Z, 2))
    table = np.array([[1, 2]], np.int32)  # slots 0..7
    new_k, new_v = jnp.ones((1, 1, 2, 3)), jnp.ones((1, 1, 3, 2))
    k_out, v_out = write_kv(k_pages, v_pages, table, np.array([7]), new_k, new_v)  # slots 7..9
    changed = [int(np.any(np.asarray(k_out)[p] != 0)) for p in range(4)]
    assert changed == [1, 0, 1, 0]  # slot 7 in page 2; slots 8 and 9 in the null page
    np.testing.assert_array_equal(np.asarray(k_out)[2, 0, :, 3], [1, 1])
    np.testing.assert_array_equal(np.asarray(v_out)[NULL_PAGE, 0, :2], np.ones((2, 2)))


def test_write_of_padding_tokens_goes_to_the_null_page():
    """n_valid_B: row 0 writes 1 of its 3 tokens, row 1 (an idle row whose table starts with
    row 0's page 1) none; only slot 5 of page 1 changes besides the null page."""
    k_pages, v_pages = jnp.zeros((4, 1, 2, Z)), jnp.zeros((4, 1, Z, 2))
    table = np.array([[3, 1], [1, 2]], np.int32)
    new_k, new_v = jnp.ones((2, 1, 2, 3)), jnp.ones((2, 1, 3, 2))
    slot, n_valid = np.array([5, 0]), np.array([1, 0])
    k_out, v_out = write_kv(k_pages, v_pages, table, slot, new_k, new_v, n_valid_B=n_valid)
    k_out, v_out = np.asarray(k_out), np.asarray(v_out)
    assert [int(np.any(k_out[p] != 0)) for p in range(4)] == [1, 1, 0, 0]
    assert [int(np.any(v_out[p] != 0)) for p in range(4)] == [1, 1, 0, 0]
    np.testing.assert_array_equal(k_out[1, 0], [[0, 1, 0, 0]] * 2)  # slot 5 = page 1, offset 1
    np.testing.assert_array_equal(v_out[1, 0, :, 0], [0, 1, 0, 0])


def test_copy_pages():
    k_pages = jnp.arange(4 * 2, dtype=jnp.float32).reshape(4, 1, 1, 2)
    v_pages = -k_pages.reshape(4, 1, 2, 1)
    src, dst = np.array([1, NULL_PAGE]), np.array([3, NULL_PAGE])  # one copy, one padding pair
    k_out, v_out = copy_pages(k_pages, v_pages, src, dst)
    np.testing.assert_array_equal(np.asarray(k_out).reshape(4, 2), [[0, 1], [2, 3], [4, 5], [2, 3]])
    np.testing.assert_array_equal(np.asarray(v_out).reshape(4, 2), -np.asarray(k_out).reshape(4, 2))


def test_new_page_tables_and_lengths_do_not_recompile():
    k_pages, v_pages, table, _, _ = _paged_cache(10)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(q, k_pages, v_pages, table, q_offset, kv_len):
        return paged_attention(q, k_pages, v_pages, table, q_offset, kv_len, block_pages=2)

    rng = np.random.default_rng(11)
    q = _queries(12, len(LENGTHS), 1)
    for _ in range(3):
        shuffled = rng.permuted(table, axis=1).astype(np.int32)
        kv_len = rng.integers(0, M * Z + 1, size=len(LENGTHS)).astype(np.int32)
        step(q, k_pages, v_pages, shuffled, kv_len - 1, kv_len).block_until_ready()


def test_heads_must_group():
    with pytest.raises(ValueError, match="3 query heads"):
        paged_attention(
            np.zeros((1, 1, 3, 4)),
            np.zeros((2, 2, 4, Z)),
            np.zeros((2, 2, Z, 4)),
            np.zeros((1, 1), np.int32),
            np.zeros(1),
            np.ones(1),
        )
