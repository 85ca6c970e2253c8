"""The transformer over a paged KV cache equals the dense path on the same tiny model.

Oracles: the full causal pass `model(tokens, attention_mask)` (right-padded
rows: every real position's logits, also teacher forcing of decoded tokens),
the dense-cache `Sampler` (greedy tokens and their log-probs), the one-shot
prefill (for chunked prefill), the f32 store (for a bf16 one) and the store
before the call (padding writes nothing into a real page).

Every paged call has B = 4 rows, a table of M = 6 pages of Z = 4 slots and
T = 16 (prefill) or T = 1 (decode), so the shared paged program compiles for
those two lengths and the two logits modes; the whole file runs in ~25 s on
one busy CPU core.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.models.paged_attention import NULL_PAGE
from rlvr_jax.models.paged_forward import PagedKVCache, paged_forward
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.sampling.pages import PagePool
from rlvr_jax.testing import tiny_config

CFG = tiny_config("qwen3")
B, T, Z, M, P = 4, 16, 4, 6, 40  # rows, prefill chunk, page size, table width, store pages
TOL = 1e-5
BF16_TOL = 0.05  # bf16 keys/values (8-bit mantissa), logits of std ~1: measured 0.013
LENGTHS = (11, 5, 16, 0)  # ragged prompts; the last row is idle


@pytest.fixture(scope="module")
def model():
    m = init_model(CFG, seed=0)
    # Random init gives logits of std ~0.15 (near-ties under greedy); std ~1.5 makes
    # greedy decoding well defined (as in tests/sampling/test_sampler.py).
    m.lm_head[...] = m.lm_head[...] * 10.0
    return m


@functools.partial(jax.jit, static_argnames=("graphdef", "logits"))
def _paged(graphdef, state, cache, tokens, table, q_offset, n_new, logits="all"):
    m = nnx.merge(graphdef, state)
    return paged_forward(m, cache, tokens, table, q_offset, n_new, logits=logits)


def _run(model, cache, tokens, table, q_offset, n_new, logits="all"):
    graphdef, state = nnx.split(model)
    args = (tokens, table, q_offset, n_new)
    return _paged(graphdef, state, cache, *(jnp.asarray(a, jnp.int32) for a in args), logits=logits)


@functools.partial(jax.jit, static_argnames="graphdef")
def _full_pass(graphdef, state, tokens, mask):
    return nnx.merge(graphdef, state)(tokens, attention_mask=mask)


def _full(model, rows):
    """Full causal pass over right-padded rows: float32 logits [len(rows), L, V] (NumPy)."""
    width = max(len(r) for r in rows)
    tokens = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), bool)
    for b, r in enumerate(rows):
        tokens[b, : len(r)], mask[b, : len(r)] = r, True
    graphdef, state = nnx.split(model)
    return np.asarray(_full_pass(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask)))


def _prompts(seed, lengths=LENGTHS):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, CFG.vocab_size, n).tolist() for n in lengths]


def _chunk(rows, width=T):
    """[len(rows), width] int32 tokens, right-padded with random ids (padding may be anything)."""
    out = np.random.default_rng(99).integers(0, CFG.vocab_size, (len(rows), width)).astype(np.int32)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return out


def _garbage_cache(seed, dtype=jnp.float32):
    """A store full of finite random values: slots no row owns must not matter."""
    rng = np.random.default_rng(seed)
    empty = PagedKVCache.zeros(CFG, P, Z, dtype)
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), dtype), empty)


def _random_tables(seed, pages_per_row):
    """[B, M] tables of distinct pages in a random order (NULL_PAGE after each row's pages)."""
    ids = iter(np.random.default_rng(seed).permutation(np.arange(1, P)))
    table = np.full((B, M), NULL_PAGE, np.int32)
    for b, n in enumerate(pages_per_row):
        table[b, :n] = [next(ids) for _ in range(n)]
    return table


def _prefill(model, cache, prompts, table):
    lengths = np.array([len(p) for p in prompts], np.int32)
    return _run(model, cache, _chunk(prompts), table, np.zeros(B, np.int32), lengths)


def test_prefill_equals_full_pass_and_padding_writes_no_real_page(model):
    """Ragged prompts in random pages: logits at every real position equal the full pass;
    the idle row's table points at another row's page and leaves it untouched."""
    prompts = _prompts(0)
    table = _random_tables(1, [-(-n // Z) for n in LENGTHS])
    table[3, 0] = table[1, 1]  # the idle row "holds" row 1's partial page
    before = _garbage_cache(2)
    logits, cache = _prefill(model, before, prompts, table)
    ref = _full(model, prompts[:3])
    for b in range(3):
        np.testing.assert_allclose(logits[b, : LENGTHS[b]], ref[b, : LENGTHS[b]], atol=TOL)
    last, _ = _run(model, before, _chunk(prompts), table, np.zeros(B), LENGTHS, logits="last")
    for b in range(3):
        np.testing.assert_allclose(last[b, 0], ref[b, LENGTHS[b] - 1], atol=TOL)
    # Only the real slots of real pages changed (NULL_PAGE absorbs every padding write).
    written = np.zeros((P, Z), bool)
    for b, n in enumerate(LENGTHS):
        for s in range(n):
            written[table[b, s // Z], s % Z] = True
    for stores, other_axes in (("k", (1, 2)), ("v", (1, 3))):  # [P, K, H, Z], [P, K, Z, H]
        for old, new in zip(getattr(before, stores), getattr(cache, stores), strict=True):
            changed_PxZ = (np.asarray(old) != np.asarray(new)).any(axis=other_axes)
            assert not changed_PxZ[1:][~written[1:]].any()
            assert changed_PxZ[written].all()


def test_greedy_decode_equals_dense_sampler_and_teacher_forcing(model):
    """Prefill then 5 greedy steps through pages from a PagePool: the dense-cache sampler's
    tokens and log-probs, and the full pass's logits on the decoded sequences."""
    steps = 5
    prompts = _prompts(3, (11, 5, 16, 3))
    pool = PagePool(P - 1, Z)
    for b, p in enumerate(prompts):
        pool.add(b, len(p))
    cache = PagedKVCache.zeros(CFG, P, Z)
    lengths = pool.lengths_array(range(B))
    last, cache = _run(
        model, cache, _chunk(prompts), pool.page_table_array(range(B), M),
        np.zeros(B), lengths, logits="last",
    )  # fmt: skip
    tokens, step_logits = [], []
    for _ in range(steps):
        step_logits.append(np.asarray(last[:, 0]))
        tok = np.argmax(step_logits[-1], axis=-1).astype(np.int32)
        tokens.append(tok)
        offsets = pool.lengths_array(range(B))
        for b in range(B):
            pool.append_tokens(b, 1)
        table = pool.page_table_array(range(B), M)
        last, cache = _run(model, cache, tok[:, None], table, offsets, np.ones(B))
    tokens, step_logits = np.stack(tokens, 1), np.stack(step_logits, 1)  # [B, steps(, V)]

    sampler = Sampler(model, batch_multiple=1)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=steps)
    out = sampler.sample(prompts, greedy, jax.random.key(0))
    np.testing.assert_array_equal(out.tokens[:, -steps:], tokens)
    logps = jax.nn.log_softmax(step_logits, axis=-1)
    chosen = np.take_along_axis(np.asarray(logps), tokens[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(out.logps[:, -steps:], chosen, atol=TOL)

    seqs = [p + tokens[b].tolist() for b, p in enumerate(prompts)]
    ref = _full(model, seqs)
    for b, p in enumerate(prompts):
        np.testing.assert_allclose(
            step_logits[b], ref[b, len(p) - 1 : len(p) - 1 + steps], atol=TOL
        )


def test_forked_group_equals_separate_rows(model):
    """One prompt (10 tokens: 2 full pages and a partial one) prefilled once and forked to 4
    rows (shared full pages, copied partial page), then 4 forced tokens per row: each row's
    logits equal a full pass over its own sequence, and the shared pages are unchanged."""
    steps, n = 4, 10
    prompt = _prompts(4, (n,))[0]
    pool = PagePool(P - 1, Z)
    pool.add("p", n)
    idle = [None] * (B - 1)
    cache = PagedKVCache.zeros(CFG, P, Z)
    table = pool.page_table_array(["p", *idle], M)
    tokens = _chunk([prompt] + [[]] * (B - 1))
    last, cache = _run(model, cache, tokens, table, np.zeros(B), [n, 0, 0, 0], logits="last")
    copies = [pool.fork("p", g) for g in range(B)]
    src, dst = (np.array(x, np.int32) for x in zip(*copies, strict=True))
    cache = cache.copy_pages(src, dst)
    pool.free("p")
    shared = pool.page_table(0)[: n // Z]
    assert all(pool.refcount(page) == B for page in shared)
    shared_kv = [np.asarray(x[np.array(shared)]) for x in cache.k + cache.v]

    forced = np.random.default_rng(5).integers(3, CFG.vocab_size, (B, steps)).astype(np.int32)
    got = [np.repeat(np.asarray(last[:, 0])[:1], B, axis=0)]
    for i in range(steps - 1):
        for g in range(B):
            pool.append_tokens(g, 1)
        table = pool.page_table_array(range(B), M)
        logits, cache = _run(
            model, cache, forced[:, i : i + 1], table, np.full(B, n + i), np.ones(B)
        )
        got.append(np.asarray(logits[:, 0]))
    got = np.stack(got, 1)  # [B, steps, V]: logits after the prompt and after each forced token
    ref = _full(model, [prompt + forced[g].tolist() for g in range(B)])
    np.testing.assert_allclose(got, ref[:, n - 1 : n - 1 + steps], atol=TOL)
    for old, x in zip(shared_kv, cache.k + cache.v, strict=True):
        np.testing.assert_array_equal(np.asarray(x[np.array(shared)]), old)


def test_chunked_prefill_equals_one_shot(model):
    """Each row's prompt split over two calls at its own point (0 and the whole prompt
    included): the second call's logits, the store at real slots and the next decode step
    equal one-shot prefill."""
    lengths = (11, 5, 16, 7)
    split = np.array([6, 0, 9, 7], np.int32)
    prompts = _prompts(6, lengths)
    table = _random_tables(7, [M] * B)
    start = _garbage_cache(8)
    one, one_cache = _prefill(model, start, prompts, table)
    first = [p[:s] for p, s in zip(prompts, split, strict=True)]
    rest = [p[s:] for p, s in zip(prompts, split, strict=True)]
    _, cache = _run(model, start, _chunk(first), table, np.zeros(B), split)
    two, cache = _run(model, cache, _chunk(rest), table, split, np.array(lengths) - split)
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(two[b, : n - split[b]], one[b, split[b] : n], atol=TOL)
        for s in range(n):
            page, off = table[b, s // Z], s % Z
            for got, want in zip(cache.k, one_cache.k, strict=True):
                np.testing.assert_allclose(got[page, ..., off], want[page, ..., off], atol=TOL)
            for got, want in zip(cache.v, one_cache.v, strict=True):
                np.testing.assert_allclose(got[page, :, off], want[page, :, off], atol=TOL)
    tok = np.full((B, 1), 7, np.int32)
    a, _ = _run(model, cache, tok, table, np.array(lengths), np.ones(B))
    b_, _ = _run(model, one_cache, tok, table, np.array(lengths), np.ones(B))
    np.testing.assert_allclose(a, b_, atol=TOL)


def test_bf16_store_tracks_f32(model):
    """Prefill and one decode step with bf16 pages (f32 compute) stay within BF16_TOL."""
    prompts = _prompts(9, (11, 5, 16, 2))
    lengths = np.array([len(p) for p in prompts], np.int32)
    table = _random_tables(10, [M] * B)
    outs = []
    for dtype in (jnp.float32, jnp.bfloat16):
        cache = PagedKVCache.zeros(CFG, P, Z, dtype)
        pre, cache = _prefill(model, cache, prompts, table)
        dec, cache = _run(model, cache, np.full((B, 1), 7), table, lengths, np.ones(B))
        assert cache.k[0].dtype == dtype
        outs.append((np.asarray(pre), np.asarray(dec)))
    real = np.arange(T)[None, :] < lengths[:, None]
    err_pre = np.abs(outs[0][0] - outs[1][0])[real].max()
    err_dec = np.abs(outs[0][1] - outs[1][1]).max()
    assert 0 < max(err_pre, err_dec) < BF16_TOL, (err_pre, err_dec)


def test_no_recompile_across_tables_offsets_and_counts(model):
    """Other page tables, offsets and new-token counts are data: one trace per chunk length."""
    traces = []

    def counted(graphdef, state, cache, tokens, table, q_offset, n_new):
        traces.append(tokens.shape)
        return paged_forward(nnx.merge(graphdef, state), cache, tokens, table, q_offset, n_new)

    fn = jax.jit(counted, static_argnames="graphdef")
    graphdef, state = nnx.split(model)
    cache = PagedKVCache.zeros(CFG, P, Z)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        table = jnp.asarray(_random_tables(seed, rng.integers(0, M + 1, B)))
        offsets = jnp.asarray(rng.integers(0, 8, B), jnp.int32)
        for t in (T, 1):
            n_new = jnp.asarray(rng.integers(0, t + 1, B), jnp.int32)
            tokens = jnp.asarray(rng.integers(0, CFG.vocab_size, (B, t)), jnp.int32)
            _, cache = fn(graphdef, state, cache, tokens, table, offsets, n_new)
    assert traces == [(B, T), (B, 1)]
