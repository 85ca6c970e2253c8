"""The page pool: budgets, allocation, sharing with copy-on-write, reuse, and its invariants.

Hand-computed cases for each operation, a random workload that checks after
every step that refcounts match the page tables, that shared pages are full
(so no write reaches them) and that every sequence reads back its own tokens
from a simulated store, and one device check: a group prefilled once and
forked attends like the dense kernel on per-row caches.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.models.attention import attention
from rlvr_jax.models.paged_attention import NULL_PAGE, copy_pages, paged_attention, write_kv
from rlvr_jax.sampling.pages import OutOfPages, PageCopy, PagePool, page_bytes, pages_for_budget

# 2 layers x 2 kv heads x head dim 8 x 16 slots x 2 bytes, keys and values.
SHAPE = dict(num_layers=2, num_kv_heads=2, head_dim=8, dtype_bytes=2)
PAGE_BYTES = 2 * 2 * 2 * 8 * 16 * 2


def test_budget_sets_the_page_count():
    assert page_bytes(16, **SHAPE) == PAGE_BYTES == 2048
    # 10 pages and a bit fit; one is the reserved null page.
    assert pages_for_budget(10 * PAGE_BYTES + 100, 16, **SHAPE) == 9
    pool = PagePool.from_budget(10 * PAGE_BYTES, 16, **SHAPE)
    assert (pool.num_pages, pool.store_pages, pool.capacity_tokens) == (9, 10, 144)


def test_a_budget_below_one_page_names_the_field_and_value():
    with pytest.raises(ValueError, match=r"rollout\.cache_gib=2\.861e-06 \(3072 bytes\) holds 0"):
        pages_for_budget(1.5 * PAGE_BYTES, 16, **SHAPE)
    with pytest.raises(ValueError, match="rollout.cache_gib"):
        PagePool.from_budget(0, 16, **SHAPE)


@pytest.mark.parametrize("page_size", [0, -4])
def test_a_nonpositive_page_size_names_the_field_and_value(page_size):
    message = f"rollout.page_size must be positive, got {page_size}"
    with pytest.raises(ValueError, match=message):
        PagePool(4, page_size)
    with pytest.raises(ValueError, match=message):
        pages_for_budget(2**30, page_size, **SHAPE)


def test_append_allocates_pages_only_when_a_page_fills():
    pool = PagePool(6, 4)
    assert pool.add("a", 5) == [1, 2]
    assert pool.append_tokens("a", 3) == []  # slots 5..7: page 2 fills
    assert pool.append_tokens("a", 1) == [3]
    assert (pool.page_table("a"), pool.length("a"), pool.num_free) == ([1, 2, 3], 9, 3)
    assert pool.add("b") == [] and pool.append_tokens("b", 4) == [4]


def test_out_of_pages_is_catchable_and_changes_nothing():
    pool = PagePool(3, 4)
    pool.add("a", 8)
    assert pool.can_allocate(4) and not pool.can_allocate(5)
    assert pool.can_allocate(0, seq="a") and not pool.can_allocate(5, seq="a")
    with pytest.raises(OutOfPages, match="needs 3 new pages; 1 of 3 are free"):
        pool.add("b", 9)
    with pytest.raises(RuntimeError):  # callers catch it to preempt
        pool.append_tokens("a", 5)
    assert "b" not in pool and pool.length("a") == 8 and pool.num_free == 1
    pool.add("c", 1)
    with pytest.raises(OutOfPages):  # the fork's copy-on-write page
        pool.fork("c", "d")
    assert "d" not in pool and pool.refcount(pool.page_table("c")[0]) == 1
    pool.free("a")
    pool.add("b", 8)


def test_freed_pages_are_reused():
    pool = PagePool(4, 4)
    first = pool.add("a", 12)
    pool.add("b", 4)
    pool.free("a")
    assert pool.num_free == 3
    assert pool.add("c", 12) == first  # the first page freed is the first reused


def test_fork_shares_full_pages_and_copies_the_partial_one():
    pool = PagePool(8, 4)
    pool.add("p", 10)  # pages 1, 2 full; 3 holds slots 8, 9
    assert pool.fork("p", "c") == PageCopy(src=3, dst=4)
    assert pool.page_table("c") == [1, 2, 4] and pool.length("c") == 10
    assert [pool.refcount(p) for p in range(5)] == [0, 2, 2, 1, 1]
    # At a page boundary nothing is copied.
    assert pool.fork("p", "aligned", length=8) is None
    assert pool.page_table("aligned") == [1, 2]
    # A forced prefix branching at token 6: page 1 shared, page 2 (slots 4, 5) copied.
    assert pool.fork("c", "branch", length=6) == PageCopy(src=2, dst=5)
    assert pool.page_table("branch") == [1, 5] and pool.refcount(1) == 4
    # Writes after the fork: each sequence's next slot is in a page it alone holds.
    for seq in ("p", "c", "aligned", "branch"):
        pool.append_tokens(seq, 1)
        table, length = pool.page_table(seq), pool.length(seq)
        assert pool.refcount(table[(length - 1) // 4]) == 1
    with pytest.raises(ValueError, match="fork length 12 outside"):
        pool.fork("p", "x", length=12)
    with pytest.raises(KeyError, match="already exists"):
        pool.fork("p", "c")


def test_one_prefill_per_group():
    """A 37-token prompt (Z = 16), G = 4: 2 shared full pages + 4 copies of the partial one."""
    pool = PagePool(16, 16)
    pool.add("prompt", 37)
    copies = [pool.fork("prompt", ("prompt", g)) for g in range(4)]
    pool.free("prompt")
    assert {c.src for c in copies} == {3} and len({c.dst for c in copies}) == 4
    assert pool.num_pages - pool.num_free == 6
    assert pool.refcount(1) == pool.refcount(2) == 4 and pool.refcount(3) == 0


def test_a_request_larger_than_the_pool_fails_naming_row_length_and_budget():
    pool = PagePool(4, 16)
    pool.check_fits(7, 64)
    with pytest.raises(ValueError, match=r"row 7: 65 tokens need 5 pages .* holds 4 pages = 64"):
        pool.check_fits(7, 65)


def test_dense_page_tables_pad_with_the_null_page():
    pool = PagePool(6, 4)
    pool.add("a", 9)
    pool.add("b", 2)
    table = pool.page_table_array(["b", None, "a"], max_pages=4)
    assert table.dtype == np.int32
    np.testing.assert_array_equal(table, [[4, 0, 0, 0], [0, 0, 0, 0], [1, 2, 3, 0]])
    np.testing.assert_array_equal(pool.lengths_array(["b", None, "a"]), [2, 0, 9])
    assert NULL_PAGE == 0
    with pytest.raises(ValueError, match="holds 3 pages > 2"):
        pool.page_table_array(["a"], max_pages=2)


def _check_invariants(pool, store, expected):
    """Refcounts = holders; shared pages full; nothing leaked; every sequence reads its tokens."""
    z, holders = pool.page_size, np.zeros(pool.store_pages, int)
    for seq in pool.sequences():
        table, length = pool.page_table(seq), pool.length(seq)
        assert NULL_PAGE not in table and len(table) == pool.pages_for(length)
        np.add.at(holders, table, 1)
        for i, page in enumerate(table):
            if pool.refcount(page) > 1:
                assert (i + 1) * z <= length, "a shared page must be full"
        got = [store[table[s // z], s % z] for s in range(length)]
        assert got == expected[seq]
    assert [pool.refcount(p) for p in range(pool.store_pages)] == holders.tolist()
    assert pool.num_free == int((holders[1:] == 0).sum())


def test_random_workload_keeps_the_invariants_and_frees_every_page():
    """Random add / append / fork / free on a small pool, tokens written into a simulated
    store through the page tables (each write asserts its page is held once)."""
    rng = np.random.default_rng(0)
    pool, z = PagePool(12, 3), 3
    store = np.full((pool.store_pages, z), -1)
    expected, next_id, token = {}, 0, 0

    def write(seq, n):
        nonlocal token
        table, start = pool.page_table(seq), pool.length(seq) - n
        for s in range(start, start + n):
            assert pool.refcount(table[s // z]) == 1, "write into a shared page"
            store[table[s // z], s % z] = token
            expected[seq].append(token)
            token += 1

    for _ in range(400):
        live, op = pool.sequences(), rng.integers(4)
        try:
            if op == 0 or not live:
                n = int(rng.integers(0, 8))
                pool.add(next_id, n)
                expected[next_id] = []
                write(next_id, n)
                next_id += 1
            elif op == 1:
                seq, n = live[rng.integers(len(live))], int(rng.integers(1, 5))
                pool.append_tokens(seq, n)
                write(seq, n)
            elif op == 2:
                seq = live[rng.integers(len(live))]
                length = int(rng.integers(0, pool.length(seq) + 1))
                copy = pool.fork(seq, next_id, length)
                if copy is not None:
                    store[copy.dst] = store[copy.src]
                expected[next_id] = expected[seq][:length]
                next_id += 1
            else:
                seq = live[rng.integers(len(live))]
                pool.free(seq)
                del expected[seq]
        except OutOfPages:
            pass
        _check_invariants(pool, store, expected)
    assert next_id > 50 and token > 100  # the workload did some of everything
    for seq in pool.sequences():
        pool.free(seq)
    assert pool.num_free == pool.num_pages
    assert all(pool.refcount(p) == 0 for p in range(pool.store_pages))


def test_group_prefill_and_forks_on_device_match_dense_attention():
    """One prompt prefilled into pages once, forked to 3 samples (the partial page copied),
    each sample decoding its own tokens, plus a branch sharing sample 0's pages up to token 7:
    paged attention over the pool's tables equals dense attention on per-row caches."""
    rng = np.random.default_rng(1)
    k, h, n, z, prompt, steps = 2, 8, 4, 4, 10, 3
    pool = PagePool(15, z)
    kp, vp = jnp.zeros((pool.store_pages, k, h, z)), jnp.zeros((pool.store_pages, k, z, h))
    m = 5
    write_jit, copy_jit = jax.jit(write_kv), jax.jit(copy_pages)

    def kv(t):
        return rng.normal(size=(1, k, h, t)).astype(np.float32), rng.normal(
            size=(1, k, t, h)
        ).astype(np.float32)

    def write(seq, k_new, v_new):
        nonlocal kp, vp
        start = pool.length(seq)
        pool.append_tokens(seq, k_new.shape[-1])
        table = pool.page_table_array([seq], m)
        kp, vp = write_jit(kp, vp, table, np.array([start]), k_new, v_new)

    def copy(c):
        nonlocal kp, vp
        if c is not None:
            kp, vp = copy_jit(kp, vp, np.array([c.src]), np.array([c.dst]))

    pool.add("prompt")
    k_prompt, v_prompt = kv(prompt)
    write("prompt", k_prompt, v_prompt)
    dense = {}
    for g in range(3):
        copy(pool.fork("prompt", g))
        dense[g] = (k_prompt, v_prompt)
    pool.free("prompt")
    for _ in range(steps):
        for g in range(3):
            k_new, v_new = kv(1)
            write(g, k_new, v_new)
            k_d, v_d = dense[g]
            dense[g] = (np.concatenate([k_d, k_new], -1), np.concatenate([v_d, v_new], -2))
    copy(pool.fork(0, "branch", length=7))
    k_new, v_new = kv(2)
    write("branch", k_new, v_new)
    dense["branch"] = (
        np.concatenate([dense[0][0][..., :7], k_new], -1),
        np.concatenate([dense[0][1][:, :, :7], v_new], -2),
    )
    rows = [0, 1, 2, "branch"]
    table, lengths = pool.page_table_array(rows, m), pool.lengths_array(rows)
    assert pool.refcount(1) == 4  # the prompt's first page: three samples and the branch
    q = rng.normal(size=(len(rows), 1, n, h)).astype(np.float32)
    out = np.asarray(paged_attention(q, kp, vp, table, lengths - 1, lengths, block_pages=2))
    # Dense caches of m·z slots (one shape, so one compile), valid up to each row's length.
    k_d = np.stack(
        [
            np.pad(dense[r][0][0], ((0, 0), (0, 0), (0, m * z - n_)))
            for r, n_ in zip(rows, lengths, strict=True)
        ]
    )
    v_d = np.stack(
        [
            np.pad(dense[r][1][0], ((0, 0), (0, m * z - n_), (0, 0)))
            for r, n_ in zip(rows, lengths, strict=True)
        ]
    )
    ref = jax.jit(attention, static_argnames="impl")
    for i in range(len(rows)):
        valid = jnp.arange(m * z)[None] < lengths[i]
        want = ref(
            q[i : i + 1],
            k_d[i : i + 1],
            v_d[i : i + 1],
            valid,
            jnp.int32(lengths[i] - 1),
            impl="xla",
        )
        np.testing.assert_allclose(out[i : i + 1], np.asarray(want), atol=1e-5)
