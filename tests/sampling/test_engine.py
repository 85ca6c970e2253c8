"""The paged continuous-batching engine against the dense Sampler, teacher forcing and itself.

Oracles: the dense-cache `Sampler` (greedy tokens, log-probs, masks, stop
flags), a full causal pass over the sampled sequences (teacher-forced
log-probs and entropy), a direct prefill of the prompt (shared pages), and the
engine's own runs with other slot counts, submission orders and pool sizes
(the draws are keyed by (key, row id, position) only; the Sampler keys them by
step and batch position, so sampled rows are compared engine to engine).

Every engine here has Z = 4, M = 16 pages per row, prefill chunks of 4 lanes x
8 tokens and S = 4 or 2 decode slots: three decode/prefill programs in all.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.models.paged_forward import PagedKVCache
from rlvr_jax.sampling import Sampler, SamplingParams, engine_step
from rlvr_jax.sampling.engine import Engine, Request
from rlvr_jax.sampling.pages import page_bytes
from rlvr_jax.testing import tiny_config

CFG = tiny_config("qwen3")
Z, MAX_LEN, N_NEW = 4, 64, 8
TOL = 1e-5
PROMPTS = [[5, 17, 33], [9, 8, 7, 6, 5, 4, 3], [42], [11, 12, 13, 14, 15, 16, 70, 71, 72, 2, 9, 1]]
SAMPLE = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)


@pytest.fixture(scope="module")
def model():
    m = init_model(CFG, seed=0)
    # Logits of std ~1.5 make greedy decoding well defined (see test_sampler.py).
    m.lm_head[...] = m.lm_head[...] * 10.0
    return m


def _engine(model, slots=4, num_pages=64):
    return Engine(
        model,
        num_pages=num_pages,
        page_size=Z,
        slots=slots,
        max_length=MAX_LEN,
        prefill_chunk=8,
        prefill_rows=4,
    )


def _paged(model, slots=4, num_pages=64):
    """A `Sampler(engine="paged")` on the engine `_engine` builds (its Rollout layout)."""
    per_page = page_bytes(Z, CFG.num_layers, CFG.num_kv_heads, CFG.head_dim, 4)
    sampler = Sampler(
        model, engine="paged", page_size=Z, decode_slots=slots, prefill_chunk=8,
        paged_prefill_rows=4, max_length=MAX_LEN, cache_bytes=per_page * (num_pages + 1),
        batch_multiple=1,
    )  # fmt: skip
    engine = sampler.paged_engine()
    assert (engine.pool.num_pages, engine.slots, engine.prefill_rows) == (num_pages, slots, 4)
    return sampler, engine


@functools.partial(jax.jit, static_argnames="graphdef")
def _full_pass(graphdef, state, tokens, mask):
    return nnx.merge(graphdef, state)(tokens, attention_mask=mask)


def _teacher_forced(model, rows):
    """log_softmax of a full causal pass over right-padded rows: [len(rows), L, V]."""
    width = 32
    tokens, mask = np.zeros((len(rows), width), np.int32), np.zeros((len(rows), width), bool)
    for b, r in enumerate(rows):
        tokens[b, : len(r)], mask[b, : len(r)] = r, True
    graphdef, state = nnx.split(model)
    logits = _full_pass(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask))
    return np.asarray(jax.nn.log_softmax(logits, axis=-1))


@pytest.fixture(scope="module")
def greedy_dense(model):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=N_NEW)
    return Sampler(model, batch_multiple=1).sample(PROMPTS, greedy, jax.random.key(0))


def test_greedy_equals_dense_sampler(model, greedy_dense):
    """Ragged prompts, greedy: the whole Rollout equals the dense Sampler's; the page store
    is donated to the device programs (the engine's first store is consumed)."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=N_NEW)
    sampler, engine = _paged(model)
    store = engine.cache.k[0]
    out = sampler.sample(PROMPTS, greedy, jax.random.key(0))
    assert store.is_deleted()  # donated: the steps updated the store in place
    ref = greedy_dense
    for name in ("tokens", "attention_mask", "prompt_mask", "response_mask", "group", "stopped"):
        np.testing.assert_array_equal(getattr(out, name), getattr(ref, name), err_msg=name)
    for name in ("logps", "entropy", "sampling_logps"):
        np.testing.assert_allclose(getattr(out, name), getattr(ref, name), atol=TOL, err_msg=name)
    assert engine.pool.num_free == engine.pool.num_pages


def test_draws_do_not_depend_on_order_or_slots(model):
    """Temperature 1, fixed key: the same rows when submitted in a permuted order, and with
    2 slots for 8 rows (rows wait and are admitted as others finish)."""
    key = jax.random.key(3)
    reqs = [Request(b, tuple(PROMPTS[b // 2]), b // 2, N_NEW, temperature=1.0) for b in range(8)]
    base = _engine(model).generate(reqs, key)
    perm = np.random.default_rng(0).permutation(len(reqs))
    permuted = _engine(model).generate([reqs[i] for i in perm], key)
    narrow = _engine(model, slots=2)
    few_slots = narrow.generate(reqs, key)
    assert narrow.stats.decode_steps > N_NEW  # rows really waited
    for b in range(8):
        assert permuted[b].tokens == base[b].tokens
        assert few_slots[b].tokens == base[b].tokens
        np.testing.assert_allclose(few_slots[b].logps, base[b].logps, atol=TOL)
    assert len({tuple(base[b].tokens) for b in range(8)}) > 4  # rows of a group differ


def test_group_prefilled_once_and_shared_pages_never_written(model):
    """G = 4 rows of one 10-token prompt: one prefill of 9 tokens (the last is fed by each
    row's first decode step), 4 copied tail pages; the 2 shared full pages still hold the
    prompt's keys/values after decoding, and the rows equal 4 unshared single-row groups."""
    prompt, g = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38], 4
    engine = _engine(model)
    reqs = [Request(b, tuple(prompt), 0, N_NEW) for b in range(g)]
    out = engine.generate(reqs, jax.random.key(1))
    # One prefill of the prompt's 9 tokens (chunks of 8: two calls), not one per row.
    assert (engine.stats.prefill_calls, engine.stats.prefill_tokens) == (2, 9)
    assert engine.stats.page_copies == g

    # A fresh pool hands out pages 1, 2, 3 to the parent: 1 and 2 full (shared), 3 partial.
    ref = PagedKVCache.zeros(CFG, engine.pool.store_pages, Z)
    tokens, table = np.zeros((4, 8), np.int32), np.zeros((4, 16), np.int32)
    tokens[0], table[0, :3] = prompt[:8], [1, 2, 3]
    graphdef, state = nnx.split(model)
    ref = engine_step.prefill(
        state, ref, tokens, table, np.zeros(4, np.int32), np.array([8, 0, 0, 0], np.int32),
        graphdef=graphdef,
    )  # fmt: skip
    for got, want in zip(engine.cache.k + engine.cache.v, ref.k + ref.v, strict=True):
        np.testing.assert_allclose(np.asarray(got[1:3]), np.asarray(want[1:3]), atol=TOL)

    separate = _engine(model).generate(
        [Request(b, tuple(prompt), 10 + b, N_NEW) for b in range(g)], jax.random.key(1)
    )
    for b in range(g):
        assert out[b].tokens == separate[b].tokens
        np.testing.assert_allclose(out[b].logps, separate[b].logps, atol=TOL)


def test_small_pool_preempts_and_matches_uninterrupted_run(model):
    """10 pages for 4 slots of rows growing to 4 pages each: rows are preempted and
    re-prefilled, and every row's tokens equal a run in an ample pool."""
    key = jax.random.key(4)
    prompts = [PROMPTS[0], PROMPTS[1], [7, 7, 8, 9, 10]]
    n_new = 12
    params = SamplingParams(temperature=1.0, max_new_tokens=n_new, n=2)
    ample = _paged(model)[0].sample(prompts, params, key)
    sampler, tight = _paged(model, num_pages=10)
    out = sampler.sample(prompts, params, key)
    assert tight.stats.preemptions > 0
    np.testing.assert_array_equal(out.tokens, ample.tokens)
    np.testing.assert_array_equal(out.response_mask, ample.response_mask)
    np.testing.assert_allclose(out.logps, ample.logps, atol=TOL)
    assert tight.pool.num_free == tight.pool.num_pages


def test_request_larger_than_pool_raises_at_once(model):
    """A row that can never fit the pool names the row, its length and the budget."""
    engine = _engine(model, num_pages=3)
    reqs = [Request(0, (1, 2), 0, 4), Request(1, tuple(range(3, 13)), 1, 8)]
    with pytest.raises(ValueError, match=r"row 1: 17 tokens need 5 pages.* 3 pages = 12 tokens"):
        engine.generate(reqs, jax.random.key(0))
    assert engine.stats.decode_steps == 0


def test_logps_equal_teacher_forcing(model):
    """Per-row temperatures, top-k and top-p: each sampled token's temperature-1 log-prob
    and entropy equal a full pass over the finished sequence."""
    knobs = [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.9), (0.0, 0, 1.0)]
    reqs = [
        Request(b, tuple(p), b, N_NEW, temperature=t, top_k=k, top_p=tp)
        for b, (p, (t, k, tp)) in enumerate(zip(PROMPTS, knobs, strict=True))
    ]
    out = _engine(model).generate(reqs, jax.random.key(5))
    seqs = [list(r.prompt) + out[r.row_id].tokens for r in reqs]
    logp = _teacher_forced(model, seqs)
    for b, r in enumerate(reqs):
        n, toks = len(r.prompt), out[b].tokens
        pos = np.arange(n - 1, n - 1 + len(toks))
        np.testing.assert_allclose(out[b].logps, logp[b, pos, toks], atol=TOL)
        ent = -(np.exp(logp[b, pos]) * logp[b, pos]).sum(-1)
        np.testing.assert_allclose(out[b].entropy, ent, atol=1e-4)


def test_stop_tokens_end_rows_and_free_pages(model, greedy_dense):
    """Greedy with a stop id met at row 0's third token, 2 slots for 4 rows: the Rollout
    equals the dense Sampler's with the same stop id, and the pool ends all free."""
    row0 = greedy_dense.sampled_tokens(0)
    stop = row0[2]
    assert stop not in row0[:2]
    params = SamplingParams(temperature=0.0, max_new_tokens=N_NEW, stop_token_ids=(stop,))
    ref = Sampler(model, batch_multiple=1).sample(PROMPTS, params, jax.random.key(0))
    sampler, engine = _paged(model, slots=2)
    out = sampler.sample(PROMPTS, params, jax.random.key(0))
    assert out.stopped[0] and len(out.sampled_tokens(0)) == 3
    for name in ("tokens", "attention_mask", "response_mask", "stopped"):
        np.testing.assert_array_equal(getattr(out, name), getattr(ref, name), err_msg=name)
    np.testing.assert_allclose(out.logps, ref.logps, atol=TOL)
    assert engine.pool.num_free == engine.pool.num_pages


def test_forced_prefixes_equal_dense_sampler(model):
    """Groups of 2 with a forced prefix per row (the parent's pages forked, then each row's
    prefix prefilled from the fork point): greedy rows equal the dense Sampler's."""
    prompts = [[5, 17, 33, 60, 61], [70, 3]]
    prefixes = [[8, 9], [10, 11, 12, 13, 14], [1], [2, 3, 4]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=N_NEW, n=2)
    ref = Sampler(model, batch_multiple=1).sample(
        prompts, greedy, jax.random.key(0), prefixes=prefixes
    )
    sampler, engine = _paged(model)
    out = sampler.sample(prompts, greedy, jax.random.key(0), prefixes=prefixes)
    # Parents of 4 and 1 tokens (prompt 0's fork is page-aligned: no copy), then each row's
    # last prompt token and prefix but its last token: 5 + (2 + 5 + 1 + 3) tokens.
    assert (engine.stats.page_copies, engine.stats.prefill_tokens) == (2, 16)
    for name in ("tokens", "attention_mask", "prompt_mask", "response_mask", "group"):
        np.testing.assert_array_equal(getattr(out, name), getattr(ref, name), err_msg=name)
    np.testing.assert_allclose(out.logps, ref.logps, atol=TOL)


def test_pool_of_one_largest_row_matches_ample_pool(model):
    """Random groups with prefixes, stop ids and budgets in a pool that holds only the
    largest row: rows are preempted, groups' parents are dropped when they block the queue
    head, and every row's tokens still equal an ample pool's."""
    rng = np.random.default_rng(0)
    reqs = []
    for g in range(3):
        prompt = tuple(int(x) for x in rng.integers(3, CFG.vocab_size, rng.integers(1, 12)))
        for _ in range(rng.integers(2, 5)):
            prefix = tuple(int(x) for x in rng.integers(3, CFG.vocab_size, rng.integers(0, 4)))
            budget = int(rng.integers(1, 14))
            reqs.append(Request(len(reqs), prompt, g, budget, prefix, stop_token_ids=(5, 9)))
    key = jax.random.key(7)
    ample = _engine(model).generate(reqs, key)
    pages = max(-(-(len(r.prompt) + len(r.prefix) + r.max_new_tokens - 1) // Z) for r in reqs)
    tight = _engine(model, num_pages=pages)
    out = tight.generate(reqs, key)
    assert tight.stats.preemptions > 0
    for r in reqs:
        assert out[r.row_id].tokens == ample[r.row_id].tokens
        assert out[r.row_id].stopped == ample[r.row_id].stopped
    assert tight.pool.num_free == pages


def test_rows_submitted_while_others_decode_equal_one_call(model):
    """The streaming run: 3 rows first, 2 decode steps, then 5 more (two of them joining
    groups that are already decoding), drained with step(): every row equals a single
    generate() over all 8, and rows come back as they end, before the queue is empty."""
    key = jax.random.key(4)
    reqs = [Request(b, tuple(PROMPTS[b // 2]), b // 2, N_NEW, temperature=1.0) for b in range(8)]
    want = _engine(model).generate(reqs, key)
    engine = _engine(model, slots=2)
    engine.start(key)
    engine.submit([reqs[i] for i in (0, 2, 4)])
    got = {}
    for _ in range(2):
        got.update(engine.step())
    engine.submit([reqs[i] for i in (1, 3, 5, 6, 7)])
    first_done = None
    while engine.pending:
        got.update(engine.step())
        if got and first_done is None:
            first_done = engine.pending
    engine.close()
    assert first_done > 0  # finished rows were handed out while others still ran
    assert sorted(got) == list(range(8))
    for b in range(8):
        assert got[b].tokens == want[b].tokens, b
        np.testing.assert_allclose(got[b].logps, want[b].logps, atol=TOL)
        assert got[b].stopped == want[b].stopped
    assert engine.pool.num_free == engine.pool.num_pages


def test_a_streaming_run_refuses_what_would_corrupt_it(model):
    engine = _engine(model)
    req = lambda b, prompt, group: Request(b, tuple(prompt), group, N_NEW, temperature=1.0)  # noqa: E731
    with pytest.raises(RuntimeError, match="start"):
        engine.submit([req(0, [5, 6], 0)])
    engine.start(jax.random.key(0))
    with pytest.raises(RuntimeError, match="already has an open run"):
        engine.start(jax.random.key(1))
    engine.submit([req(0, [5, 6], 0)])
    with pytest.raises(ValueError, match="row 0 was already submitted"):
        engine.submit([req(0, [5, 6], 0)])
    with pytest.raises(ValueError, match="group 0 has another prompt"):
        engine.submit([req(1, [7, 8], 0)])
    engine.step()
    assert engine.pending == 1
    engine.close()  # drops the pending row and frees its pages
    assert engine.pending == 0 and engine.pool.num_free == engine.pool.num_pages
    engine.start(jax.random.key(0))  # a closed engine opens again
    engine.close()


@functools.partial(jax.jit, static_argnames=("graphdef", "layer"))
def _noisy_pass(graphdef, state, tokens, noise, layer):
    from rlvr_jax.models.transformer import HiddenPerturbation

    model = nnx.merge(graphdef, state)
    return model.forward(tokens, perturbation=HiddenPerturbation(noise, layer=layer)).logits


def test_noise_rows_equal_a_full_pass_with_their_context_noise(model):
    """NC-GRPO on the engine: a noise row's every sampled log-prob equals a full causal
    pass over its tokens with the same noise (`engine_step.context_noise`) on its
    context positions after block 0, also when it was preempted and re-prefilled; clean
    rows are those of a run without noise rows; noise rows fork no shared pages."""
    key = jax.random.key(9)
    reqs = [
        Request(b, tuple(PROMPTS[b // 2]), b // 2, N_NEW, temperature=1.0,
                prefix=(7, 8) if b == 3 else (), noise_sigma=1.5 if b % 2 else 0.0)
        for b in range(8)
    ]  # fmt: skip
    engine = _engine(model)
    out = engine.generate(reqs, key, noise_layer=0)
    assert engine.stats.page_copies == 0  # groups of one clean row: nothing to share
    clean_only = _engine(model).generate([r for r in reqs if not r.noise_sigma], key)
    small = _engine(model, slots=4, num_pages=12)
    squeezed = small.generate(reqs, key, noise_layer=0)
    assert small.stats.preemptions > 0
    graphdef, state = nnx.split(model)
    for r in reqs:
        got = out[r.row_id]
        assert squeezed[r.row_id].tokens == got.tokens
        np.testing.assert_allclose(squeezed[r.row_id].logps, got.logps, atol=TOL)
        if not r.noise_sigma:
            assert got.tokens == clean_only[r.row_id].tokens
            continue
        seq = [*r.prompt, *r.prefix, *got.tokens]
        ctx = len(r.prompt) + len(r.prefix)
        noise = engine_step.context_noise(
            key, engine_step.Noise(jnp.array([r.row_id]), jnp.array([r.noise_sigma]),
                                   jnp.array([ctx])),
            jnp.arange(len(seq))[None], CFG.hidden_size,
        )  # fmt: skip
        logits = _noisy_pass(graphdef, state, jnp.asarray([seq]), noise, 0)
        logp = np.asarray(jax.nn.log_softmax(logits[0], axis=-1))
        want = [logp[ctx - 1 + j, t] for j, t in enumerate(got.tokens)]
        np.testing.assert_allclose(got.logps, want, atol=TOL)
        plain = _noisy_pass(graphdef, state, jnp.asarray([seq]), noise * 0, 0)
        assert np.abs(np.asarray(plain) - np.asarray(logits)).max() > 1e-2  # noise mattered
    with pytest.raises(ValueError, match="noise row; start the run with noise_layer"):
        _engine(model).generate(reqs[1:2], key)
