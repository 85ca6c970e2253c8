"""The KV-cache sampler against full forward passes and teacher forcing of the same model.

Every rollout here has 4 rows, a context bucket of 16 and 8 new tokens, so the
sampler's program compiles once (plus once for the prompt-noise variant; stub
models run as other weights of the same program), and the reference compiles
once for [4, 24] buffers.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import Transformer, init_model
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams
from rlvr_jax.testing import tiny_config
from tests.sampling.test_step import ref_sampling_logp, top_p_margin

CFG = tiny_config("qwen3")
ROWS, N_NEW, BUCKET = 4, 8, 16
WIDTH = BUCKET + N_NEW
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=N_NEW)
# Prompts of different lengths in one batch (the sampler left-pads them).
PROMPTS4 = [[5, 17, 33], [9, 8, 7, 6, 5, 4, 3], [42], [11, 12, 13, 14, 15, 16, 70, 71, 72, 2, 9, 1]]
PROMPTS2 = [[5, 17, 33, 60], [70, 3]]  # with n=2: rows 0, 1 answer prompt 0; rows 2, 3 prompt 1


def _sharpen(model):
    # Random init gives logits with std ~0.15, where top-2 gaps can be within float
    # rounding of the cached-vs-full-pass difference; std ~1.5 makes greedy well defined.
    model.lm_head[...] = model.lm_head[...] * 10.0
    return model


@pytest.fixture(scope="module")
def model():
    return _sharpen(init_model(CFG, seed=0))


@pytest.fixture(scope="module")
def sampler(model):
    return Sampler(model)


@pytest.fixture(scope="module")
def ref(model):
    """Jitted full (uncached) forward pass: (logits, teacher-forced logps, entropy)."""
    graphdef = nnx.graphdef(model)

    @jax.jit
    def forward(state, tokens_BxT, mask_BxT):
        m = nnx.merge(graphdef, state)
        logits = m(tokens_BxT, attention_mask=mask_BxT)
        logps, entropy = token_logps(m, tokens_BxT, mask_BxT, with_entropy=True)
        return logits, logps, entropy

    def run(state, tokens, mask):
        assert tokens.shape == (ROWS, WIDTH)  # one compiled shape
        return tuple(np.asarray(x) for x in forward(state, jnp.asarray(tokens), jnp.asarray(mask)))

    return run


def argmax_decode(ref, state, contexts, n_new=N_NEW):
    """Greedy decoding by repeated full forward passes, no cache and no padding logic.

    Each row sits unpadded at the start of a [ROWS, WIDTH] buffer; by causality
    the logits at its last token only see the row's own tokens.

    Returns:
      (generated token lists, smallest top-1/top-2 logit gap met on the way).
    """
    buf = np.zeros((ROWS, WIDTH), np.int32)
    lens = [len(c) for c in contexts]
    for b, c in enumerate(contexts):
        buf[b, : len(c)] = c
    out, gap = [[] for _ in contexts], np.inf
    for _ in range(n_new):
        logits = ref(state, buf, np.ones_like(buf, bool))[0]
        for b in range(len(contexts)):
            row = logits[b, lens[b] - 1]
            top2 = np.sort(row)[-2:]
            gap = min(gap, top2[1] - top2[0])
            buf[b, lens[b]] = int(np.argmax(row))
            out[b].append(int(np.argmax(row)))
            lens[b] += 1
    return out, gap


def check_layout(r: Rollout, prompts, forced=None):
    """Left-padded [pad | prompt | forced | generated] rows with consistent masks."""
    assert r.tokens.shape == (ROWS, WIDTH)
    p = WIDTH - N_NEW
    forced = forced or [[] for _ in prompts]
    for b, (prompt, f) in enumerate(zip(prompts, forced, strict=True)):
        start = p - len(prompt) - len(f)
        want_prompt = np.zeros(WIDTH, bool)
        want_prompt[start : start + len(prompt)] = True
        np.testing.assert_array_equal(r.prompt_mask[b], want_prompt)
        assert r.tokens[b][r.prompt_mask[b]].tolist() == list(prompt)
        assert r.tokens[b][r.forced_mask[b]].tolist() == list(f)
        assert not r.attention_mask[b, :start].any() and r.attention_mask[b, start:p].all()
        assert not r.response_mask[b, :p].any()
        np.testing.assert_array_equal(r.response_mask[b, p:], r.attention_mask[b, p:])
        # Generated tokens are contiguous: nothing real after the first padding slot.
        gen = r.attention_mask[b, p:]
        np.testing.assert_array_equal(gen, np.arange(N_NEW) < gen.sum())
        for name in ("logps", "sampling_logps", "entropy"):
            assert np.all(getattr(r, name)[b][~r.response_mask[b]] == 0), name


def assert_logps_match_teacher_forcing(ref, state, r: Rollout, atol=1e-5):
    _, logps, entropy = ref(state, r.tokens, r.attention_mask)
    m = r.response_mask
    assert m.sum() > 0
    np.testing.assert_allclose(r.logps[m], logps[m], atol=atol, rtol=0)
    np.testing.assert_allclose(r.entropy[m], entropy[m], atol=atol, rtol=0)


def assert_same_rollout(a: Rollout, b: Rollout):
    for f in dataclasses.fields(Rollout):
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


# ------------------------------------------------------------------- greedy
def test_greedy_equals_argmax_decoding(sampler, ref, model):
    r = sampler.sample(PROMPTS4, GREEDY, jax.random.key(0))
    want, gap = argmax_decode(ref, nnx.state(model), PROMPTS4)
    assert gap > 1e-4  # the comparison is not decided by float rounding
    check_layout(r, PROMPTS4)
    for b in range(ROWS):
        assert r.sampled_tokens(b) == want[b], b
        assert r.response_tokens(b) == want[b]
    np.testing.assert_array_equal(r.group, np.arange(ROWS))
    assert not r.stopped.any()
    assert np.all(r.sampling_logps == 0)  # greedy rows report 0
    assert_logps_match_teacher_forcing(ref, nnx.state(model), r)


# ------------------------------------------------------------------- log-probs
@pytest.mark.parametrize(
    "temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.9)], ids=["t1", "t0.7", "t0.7-p0.9"]
)
def test_logps_match_teacher_forcing(sampler, ref, model, temperature, top_p):
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=N_NEW, n=2)
    r = sampler.sample(PROMPTS2, params, jax.random.key(1))
    rows = [p for p in PROMPTS2 for _ in range(2)]
    check_layout(r, rows)
    np.testing.assert_array_equal(r.group, [0, 0, 1, 1])
    # logps and entropy are temperature-1, unfiltered model quantities.
    assert_logps_match_teacher_forcing(ref, nnx.state(model), r)
    # sampling_logps: the temperature-scaled (and filtered) distribution actually used.
    logits = ref(nnx.state(model), r.tokens, r.attention_mask)[0]
    checked = 0
    for b, t in zip(*np.nonzero(r.response_mask), strict=True):
        row, tok = logits[b, t - 1], r.tokens[b, t]
        if top_p < 1 and top_p_margin(row / temperature, 0, top_p) < 1e-4:
            continue  # nucleus boundary within rounding: the kept set is ambiguous
        want = ref_sampling_logp(row, temperature, 0, top_p)[tok]
        np.testing.assert_allclose(r.sampling_logps[b, t], want, atol=1e-5, err_msg=(b, t))
        checked += 1
    assert checked >= r.response_mask.sum() - 2


# ------------------------------------------------------- masks, stops, groups
def test_stop_tokens_end_rows(sampler):
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    key = jax.random.key(3)
    free = sampler.sample(PROMPTS2, params, key)
    p = WIDTH - N_NEW
    gen = free.tokens[:, p:]
    assert free.response_mask[:, p:].all() and not free.stopped.any()
    stops = (int(gen[0, 2]), int(gen[2, 5]))
    r = sampler.sample(PROMPTS2, dataclasses.replace(params, stop_token_ids=stops), key)
    check_layout(r, [q for q in PROMPTS2 for _ in range(2)])
    # Same key: each row is the unstopped row cut right after its first stop token.
    for b in range(ROWS):
        hits = [i for i, t in enumerate(gen[b]) if t in stops]
        end = hits[0] + 1 if hits else N_NEW
        assert r.stopped[b] == bool(hits)
        np.testing.assert_array_equal(r.response_mask[b, p:], np.arange(N_NEW) < end)
        assert r.sampled_tokens(b) == gen[b, :end].tolist()
        np.testing.assert_array_equal(r.logps[b, : p + end], free.logps[b, : p + end])
        np.testing.assert_array_equal(r.entropy[b, : p + end], free.entropy[b, : p + end])
        if hits:
            assert r.sampled_tokens(b)[-1] in stops
    assert r.stopped[0] and r.stopped[2]
    assert r.response_mask[0].sum() <= 3 and r.response_mask[2].sum() <= 6


def test_group_rows_differ_and_key_determines_rollout(sampler):
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=4)
    a = sampler.sample([[5, 6, 7]], params, jax.random.key(0))
    b = sampler.sample([[5, 6, 7]], params, jax.random.key(0))
    c = sampler.sample([[5, 6, 7]], params, jax.random.key(1))
    np.testing.assert_array_equal(a.group, [0, 0, 0, 0])
    assert len({tuple(a.sampled_tokens(i)) for i in range(ROWS)}) == ROWS
    assert_same_rollout(a, b)
    assert not np.array_equal(a.tokens, c.tokens)


# ---------------------------------------------------------------- recompiles
def test_sampling_knobs_and_prompt_lengths_do_not_recompile(sampler):
    key = jax.random.key(0)
    sampler.sample(PROMPTS4, GREEDY, key)
    size = sampler._generate._cache_size()
    for temperature, top_k, top_p, stops in [
        (1.0, 0, 1.0, ()),
        (0.5, 5, 0.8, (3,)),
        (1.3, 1, 0.5, (7, 9, 11, 13, 15, 17, 19, 21)),
        (0.0, 0, 1.0, (2,)),
    ]:
        params = dataclasses.replace(
            GREEDY, temperature=temperature, top_k=top_k, top_p=top_p, stop_token_ids=stops
        )
        sampler.sample(PROMPTS4, params, key)
    # New prompt lengths within the same bucket (1..16 tokens), and groups of the same size.
    sampler.sample([[1] * 16, [2], [3, 4], [5] * 9], GREEDY, jax.random.key(1))
    sampler.sample(PROMPTS2, dataclasses.replace(GREEDY, n=2), key)
    assert sampler._generate._cache_size() == size


def test_batch_sizes_within_a_row_bucket_share_one_program(sampler, ref, model):
    # Rows are padded to a multiple of 8 with idle rows: 1..8 rows reuse one program,
    # and the idle rows never leak into the result.
    sampler.sample(PROMPTS4, GREEDY, jax.random.key(0))
    size = sampler._generate._cache_size()
    want4, _ = argmax_decode(ref, nnx.state(model), PROMPTS4)
    for rows in (1, 3, 7, 8):
        r = sampler.sample((PROMPTS4 * 2)[:rows], GREEDY, jax.random.key(0))
        assert r.tokens.shape[0] == rows
        assert [r.sampled_tokens(b) for b in range(rows)] == (want4 * 2)[:rows]
    assert sampler._generate._cache_size() == size


def test_updated_state_without_recompiling(sampler, ref, model):
    model2 = _sharpen(init_model(CFG, seed=1))
    state2 = nnx.state(model2)
    before = sampler.sample(PROMPTS4, GREEDY, jax.random.key(0))
    size = sampler._generate._cache_size()
    r2 = sampler.sample(PROMPTS4, GREEDY, jax.random.key(0), state=state2)
    assert sampler._generate._cache_size() == size
    want, gap = argmax_decode(ref, state2, PROMPTS4)
    assert gap > 1e-4
    assert [r2.sampled_tokens(b) for b in range(ROWS)] == want
    assert not np.array_equal(r2.tokens, before.tokens)
    assert_logps_match_teacher_forcing(ref, state2, r2)
    # The sampler's own state is untouched.
    assert_same_rollout(sampler.sample(PROMPTS4, GREEDY, jax.random.key(0)), before)


# ---------------------------------------------------------------- prefixes
def test_prefix_continuation(sampler, ref, model):
    prefixes = [[7], [8, 9], [], [10, 11, 12]]
    rows = [q for q in PROMPTS2 for _ in range(2)]
    greedy2 = dataclasses.replace(GREEDY, n=2)
    r = sampler.sample(PROMPTS2, greedy2, jax.random.key(0), prefixes=prefixes)
    check_layout(r, rows, prefixes)
    contexts = [q + f for q, f in zip(rows, prefixes, strict=True)]
    want, gap = argmax_decode(ref, nnx.state(model), contexts)
    assert gap > 1e-4
    for b in range(ROWS):
        assert r.sampled_tokens(b) == want[b]
        assert r.response_tokens(b) == prefixes[b] + want[b]
        assert not (r.forced_mask[b] & r.response_mask[b]).any()
    # Sampled tokens after a prefix still score like teacher forcing (temperature 1).
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    r1 = sampler.sample(PROMPTS2, params, jax.random.key(5), prefixes=prefixes)
    check_layout(r1, rows, prefixes)
    assert_logps_match_teacher_forcing(ref, nnx.state(model), r1)


# ---------------------------------------------------------------- multi-turn
def test_continue_rollout(sampler, ref, model):
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    prompts = [[5, 17, 33], [70, 3]]
    key = jax.random.key(2)
    # First turn with a stop token that ends row 2 early, so rows have ragged turns.
    free = sampler.sample(prompts, params, key)
    stop = int(free.tokens[2, WIDTH - N_NEW + 3])
    first = sampler.sample(prompts, dataclasses.replace(params, stop_token_ids=(stop,)), key)
    assert first.stopped[2]
    observations = [[5, 6], [7], None, [8, 9, 10]]
    second = sampler.continue_rollout(first, observations, params, jax.random.key(3))
    assert second.tokens.shape == (ROWS, WIDTH)
    np.testing.assert_array_equal(second.group, first.group)

    def compact(r, b, name):
        return getattr(r, name)[b][r.attention_mask[b]]

    fields = ("tokens", "prompt_mask", "response_mask", "logps", "sampling_logps", "entropy")
    for b, obs in enumerate(observations):
        n_old = first.attention_mask[b].sum()
        for name in fields:
            # Earlier turns keep their tokens, roles and log-probs.
            np.testing.assert_array_equal(
                compact(second, b, name)[:n_old], compact(first, b, name), err_msg=name
            )
        if obs is None:  # ended episode: carried unchanged, nothing generated
            assert second.attention_mask[b].sum() == n_old
            assert second.stopped[b] == first.stopped[b]
            continue
        tail = compact(second, b, "tokens")[n_old:].tolist()
        assert len(tail) == len(obs) + N_NEW and tail[: len(obs)] == obs
        forced = compact(second, b, "forced_mask")[n_old:].tolist()
        assert forced == [True] * len(obs) + [False] * N_NEW
        assert compact(second, b, "response_mask")[n_old + len(obs) :].all()
        assert not second.stopped[b]  # no stop tokens this turn
    # Both turns' sampled tokens score like teacher forcing over the whole sequence.
    assert_logps_match_teacher_forcing(ref, nnx.state(model), second)


# ------------------------------------------------------------ NC-GRPO noise
def test_prompt_noise_changes_only_noisy_rows(sampler):
    greedy2 = dataclasses.replace(GREEDY, n=2)
    key = jax.random.key(0)
    base = sampler.sample(PROMPTS2, greedy2, key)
    noisy_rows = [True, False, False, True]
    noisy_params = dataclasses.replace(greedy2, prompt_noise_sigma=1.0, prompt_noise_layer=0)
    noisy = sampler.sample(PROMPTS2, noisy_params, key, noise_rows=noisy_rows)
    size = sampler._generate._cache_size()
    p = WIDTH - N_NEW
    for b in (1, 2):  # no noise: same as the noise-free run
        np.testing.assert_array_equal(noisy.tokens[b], base.tokens[b])
        np.testing.assert_allclose(noisy.logps[b], base.logps[b], atol=1e-6)
    for b in (0, 3):  # noisy: the first next-token distribution moved
        assert abs(noisy.entropy[b, p] - base.entropy[b, p]) > 1e-4
    assert not np.array_equal(noisy.tokens[[0, 3]], base.tokens[[0, 3]])
    # Sigma is data: another sigma does not recompile.
    other = dataclasses.replace(noisy_params, prompt_noise_sigma=0.5)
    sampler.sample(PROMPTS2, other, key, noise_rows=noisy_rows)
    assert sampler._generate._cache_size() == size
    # sigma = 0, or no noisy rows, is exactly the noise-free run.
    zero = dataclasses.replace(noisy_params, prompt_noise_sigma=0.0)
    assert_same_rollout(sampler.sample(PROMPTS2, zero, key, noise_rows=noisy_rows), base)
    assert_same_rollout(sampler.sample(PROMPTS2, noisy_params, key), base)
    with pytest.raises(ValueError, match="noise_rows"):
        sampler.sample(PROMPTS2, noisy_params, key, noise_rows=[True])


# ------------------------------------------------------------- stub models
def _successor_weights(m):
    """Turns `m` into a stub predicting token + 1 (for tokens < hidden_size - 1), in place.

    Attention and MLP outputs are zeroed, so the final hidden state is the
    normalised embedding of the current token; embeddings are one-hot and the
    head maps dimension t to token t + 1 with logit 40 (every other logit is 0).
    """
    v, d = CFG.vocab_size, CFG.hidden_size
    for block in m.layers:
        block.self_attn.o_proj.kernel[...] = jnp.zeros_like(block.self_attn.o_proj.kernel[...])
        block.mlp.down_proj.kernel[...] = jnp.zeros_like(block.mlp.down_proj.kernel[...])
    emb = np.zeros((v, d), np.float32)
    emb[np.arange(v), np.arange(v) % d] = 10.0
    head = np.zeros((d, v), np.float32)
    head[np.arange(d - 1), np.arange(1, d)] = 5.0
    m.embed_tokens[...] = jnp.asarray(emb)
    m.lm_head[...] = jnp.asarray(head)
    return m


@pytest.fixture(scope="module")
def successor_state():
    # Same structure as `model`: the module's sampler runs it without recompiling.
    return nnx.state(_successor_weights(init_model(CFG, seed=0)))


SUCCESSOR_PROMPTS = [[3, 10], [7, 1, 4, 20], [30], [5, 6, 7, 8, 9, 40]]


def test_successor_stub_greedy_and_stops(sampler, successor_state):
    size = sampler._generate._cache_size()
    r = sampler.sample(SUCCESSOR_PROMPTS, GREEDY, jax.random.key(0), state=successor_state)
    check_layout(r, SUCCESSOR_PROMPTS)
    for b, q in enumerate(SUCCESSOR_PROMPTS):
        assert r.sampled_tokens(b) == list(range(q[-1] + 1, q[-1] + 1 + N_NEW))
    assert not r.stopped.any()
    # Stops at different steps: each row is cut right after its own stop token.
    params = dataclasses.replace(GREEDY, stop_token_ids=(14, 25, 31, 46))
    r = sampler.sample(SUCCESSOR_PROMPTS, params, jax.random.key(0), state=successor_state)
    check_layout(r, SUCCESSOR_PROMPTS)
    assert [r.sampled_tokens(b) for b in range(ROWS)] == [
        [11, 12, 13, 14],
        [21, 22, 23, 24, 25],
        [31],
        [41, 42, 43, 44, 45, 46],
    ]
    assert r.stopped.all()
    assert sampler._generate._cache_size() == size


def test_every_row_stops_at_its_first_token(sampler, successor_state):
    stops = tuple(q[-1] + 1 for q in SUCCESSOR_PROMPTS)
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, stop_token_ids=stops)
    r = sampler.sample(SUCCESSOR_PROMPTS, params, jax.random.key(0), state=successor_state)
    check_layout(r, SUCCESSOR_PROMPTS)
    np.testing.assert_array_equal(r.response_mask.sum(axis=1), 1)
    assert [r.sampled_tokens(b) for b in range(ROWS)] == [[s] for s in stops]
    assert r.stopped.all()
    np.testing.assert_allclose(r.logps[r.response_mask], 0.0, atol=1e-6)  # p(successor) ~ 1


def test_uniform_model_samples_uniformly(sampler, model):
    # A zero head gives uniform next-token distributions: every log-prob is -log V
    # at any temperature, and fresh randomness each step and row gives varied tokens
    # (reusing one key across steps would repeat a row's token).
    uniform = init_model(CFG, seed=0)
    uniform.lm_head[...] = jnp.zeros_like(uniform.lm_head[...])
    params = SamplingParams(temperature=0.7, max_new_tokens=N_NEW)
    r = sampler.sample(PROMPTS4, params, jax.random.key(4), state=nnx.state(uniform))
    check_layout(r, PROMPTS4)
    m = r.response_mask
    log_v = np.log(CFG.vocab_size)
    np.testing.assert_allclose(r.logps[m], -log_v, atol=1e-5)
    np.testing.assert_allclose(r.sampling_logps[m], -log_v, atol=1e-5)
    np.testing.assert_allclose(r.entropy[m], log_v, atol=1e-5)
    for b in range(ROWS):
        assert len(set(r.sampled_tokens(b))) > 1
    assert len(set(r.tokens[m].tolist())) >= 20  # 32 uniform draws of 128: ~28 distinct


_FORWARD_CALLS = [0]


def _count_forward():
    _FORWARD_CALLS[0] += 1


class _CountingTransformer(Transformer):
    """The Transformer, counting forward passes as they run (inside jit and while_loop)."""

    def forward(self, *args, **kwargs):
        jax.debug.callback(_count_forward)
        return super().forward(*args, **kwargs)


def _count_calls(fn):
    jax.effects_barrier()
    _FORWARD_CALLS[0] = 0
    out = fn()
    jax.effects_barrier()
    return out, _FORWARD_CALLS[0]


@pytest.mark.slow  # compiles the sampler for a second model class
def test_decode_loop_ends_when_every_row_stops(successor_state):
    counting = _CountingTransformer(CFG, rngs=nnx.Rngs(0))
    nnx.update(counting, successor_state)
    counting_sampler = Sampler(counting)
    key = jax.random.key(0)

    def run(stops):
        params = dataclasses.replace(GREEDY, stop_token_ids=stops)
        return _count_calls(lambda: counting_sampler.sample(SUCCESSOR_PROMPTS, params, key))

    r, calls = run(())
    assert r.response_mask.sum() == ROWS * N_NEW
    assert calls == 1 + N_NEW  # prefill + one forward per decode step
    # Rows stop after 4, 5, 1 and 6 tokens: the loop ends with the last row (6 steps).
    r, calls = run((14, 25, 31, 46))
    np.testing.assert_array_equal(r.response_mask.sum(axis=1), [4, 5, 1, 6])
    assert calls == 1 + 6
    # Every row stops at its first token: a single decode step.
    r, calls = run(tuple(q[-1] + 1 for q in SUCCESSOR_PROMPTS))
    np.testing.assert_array_equal(r.response_mask.sum(axis=1), 1)
    assert calls == 1 + 1


# ------------------------------------------------------------------ bad inputs
def test_invalid_sampling_params():
    for kwargs in [
        dict(temperature=-0.1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(max_new_tokens=0),
        dict(n=0),
        dict(stop_token_ids=tuple(range(9))),
    ]:
        with pytest.raises(ValueError):
            SamplingParams(**kwargs)


def test_bad_inputs(sampler, model):
    key = jax.random.key(0)
    short = Sampler(model, max_length=20)
    with pytest.raises(ValueError, match="20"):
        short.sample([[5] * 13], GREEDY, key)  # 13 + 8 > 20
    with pytest.raises(ValueError, match=str(CFG.vocab_size)):
        sampler.sample([[5, CFG.vocab_size, 6]], GREEDY, key)
    with pytest.raises(ValueError, match="-3"):
        sampler.sample([[5, -3]], GREEDY, key)
    with pytest.raises(ValueError):
        sampler.sample([[5, 6], []], GREEDY, key)
    with pytest.raises(ValueError):
        sampler.sample([], GREEDY, key)
    with pytest.raises(ValueError, match="prefixes"):
        sampler.sample(PROMPTS2, dataclasses.replace(GREEDY, n=2), key, prefixes=[[1], [2]])
    with pytest.raises(ValueError, match=str(CFG.vocab_size + 1)):
        sampler.sample(PROMPTS2, GREEDY, key, prefixes=[[1], [CFG.vocab_size + 1]])


def test_continue_rollout_bad_inputs(sampler, model):
    key = jax.random.key(0)
    first = sampler.sample(PROMPTS4, GREEDY, key)
    with pytest.raises(ValueError, match="observations"):
        sampler.continue_rollout(first, [[1], [2]], GREEDY, key)
    with pytest.raises(ValueError, match=str(CFG.vocab_size)):
        sampler.continue_rollout(first, [[1], [CFG.vocab_size], None, None], GREEDY, key)
    # The longest row (12 prompt + 8 generated) plus 8 new tokens overflows 24 positions.
    short = Sampler(model, max_length=24)
    with pytest.raises(ValueError, match="24"):
        short.continue_rollout(first, [None, None, None, [1]], GREEDY, key)


@pytest.mark.slow  # compiles a program for a cache shorter than the bucket
def test_context_filling_the_cache_exactly(model, ref):
    short = Sampler(model, max_length=12)
    prompts = [[7, 8, 9, 10], [3], [4, 5], [6, 7, 8]]
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW)
    r = short.sample(prompts, params, jax.random.key(0))  # 4 + 8 == 12 fits
    assert r.tokens.shape == (ROWS, 12)
    assert r.response_mask.sum() == ROWS * N_NEW
    pad = np.zeros((ROWS, WIDTH - 12), bool)
    tokens = np.concatenate([r.tokens, pad.astype(np.int32)], axis=1)  # right-pad for the ref
    mask = np.concatenate([r.attention_mask, pad], axis=1)
    _, logps, _ = ref(nnx.state(model), tokens, mask)
    np.testing.assert_allclose(r.logps[r.response_mask], logps[:, :12][r.response_mask], atol=1e-5)
    with pytest.raises(ValueError, match="12"):
        short.sample([[7, 8, 9, 10, 11]], params, jax.random.key(0))  # 5 + 8 > 12
