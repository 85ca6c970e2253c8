"""`Sampler(engine="paged")`: the paged engine behind the Sampler interface.

Oracles: the static Sampler (greedy rollouts equal field by field), a full causal pass
(teacher-forced log-probs, via test_sampler's helpers) and the engine itself
(sampled rows do not depend on the slot count). Every paged sampler here has
Z = 4, S = 4 slots and prefill chunks of 8 tokens.
"""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.sampling.pages import page_bytes
from rlvr_jax.sharding import make_mesh
from tests.sampling import test_sampler
from tests.sampling.test_sampler import (
    CFG,
    GREEDY,
    N_NEW,
    PROMPTS2,
    PROMPTS4,
    WIDTH,
    assert_logps_match_teacher_forcing,
    assert_same_rollout,
    check_layout,
)

model, ref = test_sampler.model, test_sampler.ref  # the same fixtures

MAX_LEN = 64


def _paged(model, **kw):
    kw = dict(page_size=4, decode_slots=4, prefill_chunk=8) | kw
    return Sampler(model, engine="paged", max_length=MAX_LEN, **kw)


@pytest.fixture(scope="module")
def static(model):
    return Sampler(model, max_length=MAX_LEN)


@pytest.fixture(scope="module")
def paged(model):
    return _paged(model)


def assert_close_rollout(a, b, atol=1e-5):
    for name in ("tokens", "attention_mask", "prompt_mask", "response_mask", "group", "stopped"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("logps", "sampling_logps", "entropy"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=atol, err_msg=name)


def test_greedy_sample_equals_static(paged, static):
    """Ragged prompts, groups of 2 sharing one prefill, forced prefixes: greedy rollouts equal
    the static path's; the engine prefilled each group's prompt once."""
    assert_close_rollout(
        paged.sample(PROMPTS4, GREEDY, jax.random.key(0)),
        static.sample(PROMPTS4, GREEDY, jax.random.key(0)),
    )
    greedy2 = dataclasses.replace(GREEDY, n=2)
    prefixes = [[7], [8, 9], [], [10, 11, 12]]
    out = paged.sample(PROMPTS2, greedy2, jax.random.key(0), prefixes=prefixes)
    check_layout(out, [q for q in PROMPTS2 for _ in range(2)], prefixes)
    assert_close_rollout(
        out, static.sample(PROMPTS2, greedy2, jax.random.key(0), prefixes=prefixes)
    )
    stats = paged.paged_engine().stats
    assert stats.page_copies == 4  # every row forked its group's prefilled prompt
    # Parents (prompt minus its last token) once per group, then each row's own context
    # past the fork (the prompt's last token and the prefix) minus its last token, which
    # the first decode step feeds.
    parents = sum(len(q) - 1 for q in PROMPTS2)
    own = sum(1 + len(f) - 1 for f in prefixes)
    assert stats.prefill_tokens == parents + own


def test_sampled_rows_score_like_teacher_forcing_and_ignore_slots(paged, model, ref):
    """Temperature 1: log-probs equal a full pass; 2 slots for 8 rows give the same rows."""
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    key = jax.random.key(4)
    out = paged.sample(PROMPTS4, params, key)
    assert out.tokens.shape == (8, WIDTH)
    assert_logps_match_teacher_forcing(ref, nnx.state(model), _rows(out, 4))
    assert_logps_match_teacher_forcing(ref, nnx.state(model), _rows(out, 4, 8))
    narrow = _paged(model, decode_slots=2)
    assert_close_rollout(narrow.sample(PROMPTS4, params, key), out)
    assert narrow.paged_engine().stats.decode_steps > N_NEW  # rows waited for slots
    # Another key, other rows (the key is used).
    assert not np.array_equal(paged.sample(PROMPTS4, params, jax.random.key(5)).tokens, out.tokens)


def _rows(r, lo, hi=None):
    """Rows [lo:hi] (or [0:lo]) of a Rollout, for the 4-row teacher-forcing oracle."""
    sl = slice(0, lo) if hi is None else slice(lo, hi)
    return dataclasses.replace(r, **{f.name: getattr(r, f.name)[sl] for f in dataclasses.fields(r)})


def test_continue_rollout_equals_static_and_carries_ended_rows(paged, static, model, ref):
    """A second turn after observations, one row ended: greedy equals the static path,
    earlier turns keep their log-probs, the ended row is carried and generates nothing."""
    greedy2 = dataclasses.replace(GREEDY, n=2)
    first = static.sample(PROMPTS2, greedy2, jax.random.key(0))
    observations = [[5, 6], [7], None, [8, 9, 10]]
    want = static.continue_rollout(first, observations, GREEDY, jax.random.key(3))
    got = paged.continue_rollout(first, observations, GREEDY, jax.random.key(3))
    assert_close_rollout(got, want)
    assert got.attention_mask[2].sum() == first.attention_mask[2].sum()
    assert got.stopped[2] == first.stopped[2]
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW)
    sampled = paged.continue_rollout(first, observations, params, jax.random.key(3))
    assert_logps_match_teacher_forcing(ref, nnx.state(model), sampled)


def test_noise_rows_are_sampled_by_the_engine(paged):
    """NC-GRPO prompt noise runs on the engine (tests/sampling/test_engine.py checks its
    numbers): noise rows differ from the same rows without noise, clean rows do not, and
    sigma 0 is the clean call."""
    params = SamplingParams(
        temperature=1.0, max_new_tokens=N_NEW, n=2, prompt_noise_sigma=1.0, prompt_noise_layer=0
    )
    rows = [True, False, False, True]
    key = jax.random.key(7)
    noisy = paged.sample(PROMPTS2, params, key, noise_rows=rows)
    clean = paged.sample(PROMPTS2, dataclasses.replace(params, prompt_noise_sigma=0.0), key,
                         noise_rows=rows)  # fmt: skip
    plain = paged.sample(PROMPTS2, params, key)
    assert_same_rollout(clean, plain)
    for b, is_noise in enumerate(rows):
        m = noisy.response_mask[b]
        same = np.array_equal(noisy.logps[b][m], plain.logps[b][plain.response_mask[b]])
        assert same != is_noise, b


def test_budget_sets_the_pool_and_bad_settings_name_the_field(model):
    """cache_bytes = k pages (+ the null page) gives a pool of k pages; bad settings raise."""
    per_page = page_bytes(4, CFG.num_layers, CFG.num_kv_heads, CFG.head_dim, 4)
    sized = _paged(model, cache_bytes=per_page * 41)
    assert sized.paged_engine().pool.num_pages == 40
    default = _paged(model)  # every slot can hold a max_length row
    assert default.paged_engine().pool.num_pages == 4 * (MAX_LEN // 4)
    with pytest.raises(ValueError, match="rollout.cache_gib"):
        _paged(model, cache_bytes=per_page * 1.5).paged_engine()
    with pytest.raises(ValueError, match="engine='bogus'"):
        Sampler(model, engine="bogus")
    one = make_mesh((1, 1, 1), jax.devices()[:1])
    assert Sampler(model, engine="paged", mesh=one).engine == "paged"  # the trainer's default
    # A row longer than the whole pool fails before anything runs, naming the row.
    tiny = _paged(model, cache_bytes=per_page * 3)
    with pytest.raises(ValueError, match="row 0"):
        tiny.sample([[1] * 20], GREEDY, jax.random.key(0))


def test_with_model_keeps_the_engine_settings(paged, model):
    other = paged.with_model(model)
    kept = (other.engine, other.page_size, other.decode_slots, other.prefill_chunk)
    assert kept + (other.paged_kernel, other.paged_block_pages) == ("paged", 4, 4, 8, "jax", 2)
    assert other.paged_engine() is not paged.paged_engine()


def test_row_ids_key_each_row_whatever_else_is_in_the_call(paged, static):
    """With row_ids a row's samples depend on its id and prompt only: a prompt sampled alone
    under ids (10, 11) equals the same prompt at another position, next to other prompts,
    under the same ids; the default ids (positions) give other draws."""
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    key = jax.random.key(3)
    alone = paged.sample([PROMPTS4[1]], params, key, row_ids=[10, 11])
    mixed = paged.sample([PROMPTS4[0], PROMPTS4[1]], params, key, row_ids=[4, 5, 10, 11])
    for a, m in ((0, 2), (1, 3)):
        assert alone.sampled_tokens(a) == mixed.sampled_tokens(m)
        assert alone.stopped[a] == mixed.stopped[m]
        np.testing.assert_allclose(
            alone.logps[a][alone.response_mask[a]], mixed.logps[m][mixed.response_mask[m]],
            atol=1e-5,
        )  # fmt: skip
    by_position = paged.sample([PROMPTS4[1]], params, key)  # ids 0, 1
    assert [by_position.sampled_tokens(b) for b in (0, 1)] != [
        alone.sampled_tokens(b) for b in (0, 1)
    ]
    with pytest.raises(ValueError, match="2 distinct ids"):
        paged.sample([PROMPTS4[1]], params, key, row_ids=[3, 3])
    with pytest.raises(ValueError, match="engine='static'"):
        static.sample([PROMPTS4[1]], params, key, row_ids=[0, 1])


def test_data_parallel_engines_sample_the_rows_one_engine_samples(paged, model):
    """On a mesh of 2 devices (weights replicated) each device runs its own engine on a
    share of the groups, at once; the rows equal one engine's exactly, because a row's
    draws depend on its id only. A mesh that splits the weights is refused."""
    two = _paged(model, mesh=make_mesh((2, 1, 1), jax.devices()[:2]))
    params = SamplingParams(temperature=1.0, max_new_tokens=N_NEW, n=2)
    key = jax.random.key(5)
    want = paged.sample(PROMPTS4, params, key)
    got = two.sample(PROMPTS4, params, key)
    for name in ("tokens", "attention_mask", "response_mask", "group", "stopped"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    for name in ("logps", "sampling_logps", "entropy"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    devices = two.engine_devices()
    assert devices == jax.devices()[:2]
    steps = [two.paged_engine(d).stats.decode_steps for d in devices]
    assert all(s > 0 for s in steps), steps  # both engines sampled rows
    pages = two.paged_engine(devices[1]).cache.k[0]
    assert pages.devices() == {devices[1]}  # its page store lives on its own device
    with pytest.raises(ValueError, match="fsdp or tensor > 1"):
        _paged(model, mesh=make_mesh((1, 2, 1), jax.devices()[:2]))
