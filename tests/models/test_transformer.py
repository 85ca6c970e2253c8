"""The transformer against transformers (same weights), and its own invariants.

Oracles: the torch model of each tiny checkpoint (logits, hidden states), the
model's own full forward (KV cache), and exact zeros (causality, padding).

Speed: every forward goes through one jitted helper, and the tests share a few
shapes, so each (family, shape) compiles once (~1.5 s of CPU); running eagerly
would compile every op for every new shape (~6 s per shape). Family-agnostic
properties run on one family by default and on all three under `-m slow`.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import (
    HiddenPerturbation,
    KVCache,
    abstract_model,
    load_pretrained,
)
from rlvr_jax.testing import tiny_config

torch = pytest.importorskip("torch")

FAMILIES = ("qwen3", "qwen2", "llama")
B, T = 3, 100  # the shared batch shape; T > original_max_position_embeddings=64 of tiny llama
PARITY_TOL = 1e-4
CACHE_TOL = 1e-5


def _families(fast, *rest):
    """`fast` runs by default; the other families carry the slow marker."""
    return [fast] + [pytest.param(f, marks=pytest.mark.slow) for f in rest]


@functools.partial(nnx.jit, static_argnames=("logits",))
def _forward(model, ids, mask=None, cache=None, perturbation=None, logits="all"):
    return model.forward(
        ids, mask, cache=cache, perturbation=perturbation, logits=logits, return_hidden=True
    )


def _logits(model, ids, mask=None, **kw):
    return _forward(model, jnp.asarray(ids), None if mask is None else jnp.asarray(mask), **kw)


def _batch(rng, padding, batch=B, length=T, vocab=128):
    """ids [B, T] int32 (random tokens, also at pads) and mask [B, T] int32."""
    ids = rng.integers(3, vocab, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    for row, n in enumerate([0, 7, 40][:batch]):
        if n and padding == "left":
            mask[row, :n] = 0
        elif n and padding == "right":
            mask[row, length - n :] = 0
    return ids, mask


def _hf(torch_model, ids, mask):
    """transformers' (logits [B, T, V], hidden_states) with the position ids we use."""
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    with torch.no_grad():
        out = torch_model(
            input_ids=torch.from_numpy(ids).long(),
            attention_mask=torch.from_numpy(mask).long(),
            position_ids=torch.from_numpy(positions).long(),
            output_hidden_states=True,
        )
    return out.logits.numpy(), [h.numpy() for h in out.hidden_states]


def _max_err(a, b, mask):
    """max |a - b| over real (mask == 1) positions of [B, T, ...] arrays."""
    diff = np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))
    return float(diff[np.asarray(mask).astype(bool)].max())


# ------------------------------------------------------------------ HF parity


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_hidden_match_transformers(ckpt, family, padding, record_property):
    c = ckpt(family)
    ids, mask = _batch(np.random.default_rng(0), padding)
    ref, ref_hidden = _hf(c.torch_model, ids, mask)
    out = _logits(c.model, ids, mask)
    assert out.logits.dtype == jnp.float32 and out.logits.shape == ref.shape
    err = _max_err(out.logits, ref, mask)
    record_property("max_abs_err", err)
    print(f"parity {family}/{padding}: max abs err {err:.2e} (logit scale {np.abs(ref).max():.2f})")
    assert np.abs(ref).max() > 0.5  # logits of order 1, so the tolerance is meaningful
    assert err <= PARITY_TOL
    # transformers' last hidden state is taken after the final norm, like ours.
    assert out.hidden.shape == (B, T, c.config.hidden_size)
    assert _max_err(out.hidden, ref_hidden[-1], mask) <= PARITY_TOL
    np.testing.assert_allclose(c.model.logits_from_hidden(out.hidden), out.logits, atol=1e-6)


def test_llama3_rope_scaling_is_what_makes_llama_match(ckpt):
    """Sensitivity check: without its rope scaling the same llama weights miss the oracle."""
    c = ckpt("llama")
    ids, mask = _batch(np.random.default_rng(0), "none")
    ref, _ = _hf(c.torch_model, ids, mask)
    config = c.config.replace(rope_scaling=None)
    unscaled = nnx.merge(nnx.graphdef(abstract_model(config)), nnx.state(c.model))
    err = _max_err(_logits(unscaled, ids, mask).logits, ref, mask)
    print(f"llama without rope scaling: max abs err {err:.2e}")
    assert err > 100 * PARITY_TOL


def test_forward_rejects_unknown_logits_mode(ckpt):
    ones = np.ones((1, 4), np.int32)
    with pytest.raises(ValueError, match="'every'.*'all', 'last' or 'none'"):
        _logits(ckpt("qwen3").model, ones, ones, logits="every")


# ------------------------------------------------------------------- KV cache

PROMPT, GEN = 7, 7  # the prompt is left-padded by 3 in row 1


def _cache_case(c, seed):
    rng = np.random.default_rng(seed)
    prompt, prompt_mask = _batch(rng, "none", batch=2, length=PROMPT)
    prompt_mask[1, :3] = 0
    gen = rng.integers(3, 128, (2, GEN)).astype(np.int32)
    cache = KVCache.zeros(c.config, 2, PROMPT + GEN)
    prefill = _logits(c.model, prompt, prompt_mask, cache=cache, logits="last")
    return prompt, prompt_mask, gen, prefill


@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_kv_cache_token_by_token_matches_full_forward(ckpt, family):
    c = ckpt(family)
    prompt, prompt_mask, gen, out = _cache_case(c, seed=2)
    full_ids = np.concatenate([prompt, gen], axis=1)
    full_mask = np.concatenate([prompt_mask, np.ones_like(gen)], axis=1)
    full = np.asarray(_logits(c.model, full_ids, full_mask).logits)

    assert out.logits.shape == (2, 1, c.config.vocab_size)
    errs = [np.abs(out.logits[:, 0] - full[:, PROMPT - 1]).max()]
    cache = out.cache
    for i in range(GEN):
        out = _logits(c.model, gen[:, i : i + 1], np.ones((2, 1), np.int32), cache=cache)
        errs.append(np.abs(out.logits[:, 0] - full[:, PROMPT + i]).max())
        cache = out.cache
    assert max(errs) <= CACHE_TOL, errs
    assert int(cache.index) == PROMPT + GEN
    np.testing.assert_array_equal(cache.next_pos_B, [PROMPT + GEN, PROMPT + GEN - 3])
    np.testing.assert_array_equal(cache.valid_BxS, full_mask.astype(bool))


@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_kv_cache_chunk_with_a_hole_matches_full_forward(ckpt, family):
    """A 3-token chunk in which row 1 skips a slot (as a finished row would), then
    single tokens, equals the full forward over the same ids and mask."""
    c = ckpt(family)
    prompt, prompt_mask, gen, out = _cache_case(c, seed=3)
    gen_mask = np.ones_like(gen)
    gen_mask[1, 1] = 0
    full_mask = np.concatenate([prompt_mask, gen_mask], axis=1)
    full = np.asarray(_logits(c.model, np.concatenate([prompt, gen], 1), full_mask).logits)

    chunk = _logits(c.model, gen[:, :3], gen_mask[:, :3], cache=out.cache)
    assert chunk.logits.shape == (2, 3, c.config.vocab_size)
    assert _max_err(chunk.logits, full[:, PROMPT : PROMPT + 3], gen_mask[:, :3]) <= CACHE_TOL
    cache = chunk.cache
    for i in range(3, GEN):
        out = _logits(c.model, gen[:, i : i + 1], gen_mask[:, i : i + 1], cache=cache)
        np.testing.assert_allclose(out.logits[:, 0], full[:, PROMPT + i], atol=CACHE_TOL, rtol=0)
        cache = out.cache
    np.testing.assert_array_equal(cache.next_pos_B, [PROMPT + GEN, PROMPT + GEN - 4])


def test_kv_cache_rejects_a_chunk_longer_than_the_cache(ckpt):
    c = ckpt("qwen3")
    cache = KVCache.zeros(c.config, 1, 4)
    ones = np.ones((1, 5), np.int32)
    with pytest.raises(ValueError, match="5 new tokens do not fit a KV cache of length 4"):
        _logits(c.model, ones, ones, cache=cache)


# ---------------------------------------------------------------- causality


@pytest.mark.parametrize("family", _families("qwen3", "llama"))  # untied heads only
def test_causal_and_pad_blind_by_input_embedding_gradients(ckpt, family):
    """d logits[t] / d embedding(token at s) is exactly 0 for s > t and for padding s,
    and non-zero for every real s <= t.

    Tokens are distinct, so the gradient on an embedding row is the gradient
    through exactly one position (with an untied head there is no other path).
    """
    c = ckpt(family)
    length, pad = 12, 3
    ids = np.random.default_rng(4).permutation(np.arange(3, 128))[:length][None]
    mask = np.r_[[0] * pad, [1] * (length - pad)][None]
    proj_V = jnp.asarray(np.random.default_rng(5).standard_normal(c.config.vocab_size))
    graphdef, embed, rest = nnx.split(c.model, nnx.PathContains("embed_tokens"), ...)

    def projected_logits_T(embed, rest):
        logits = nnx.merge(graphdef, embed, rest)(jnp.asarray(ids), jnp.asarray(mask))
        return logits[0] @ proj_V.astype(jnp.float32)

    (jac_TxVxD,) = jax.tree.leaves(jax.jit(jax.jacrev(projected_logits_T))(embed, rest))
    norms_TxS = np.linalg.norm(np.asarray(jac_TxVxD)[:, ids[0]], axis=-1)[pad:]  # real t
    t = np.arange(pad, length)[:, None]
    s = np.arange(length)[None, :]
    blind = (s > t) | (s < pad)
    assert np.all(norms_TxS[blind] == 0.0)
    assert np.all(norms_TxS[~blind] > 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_causal_and_pad_blind_by_hidden_perturbation_gradients(ckpt, family):
    """d logits[t] / d hidden after block 0 at s: exactly 0 for s > t and for padding s.

    Also covers tied heads (qwen2), where embedding gradients mix positions.
    """
    c = ckpt(family)
    length, pad = 10, 3
    ids, mask = _batch(np.random.default_rng(6), "none", batch=1, length=length)
    mask[0, :pad] = 0
    proj_V = jnp.asarray(np.random.default_rng(7).standard_normal(c.config.vocab_size))
    graphdef, state = nnx.split(c.model)

    def projected_logits_T(noise_1xTxD, state):
        pert = HiddenPerturbation(noise_1xTxD, layer=0, relative_to_rms=False)
        logits = nnx.merge(graphdef, state).forward(ids, mask, perturbation=pert).logits
        return logits[0] @ proj_V.astype(jnp.float32)

    noise = jnp.zeros((1, length, c.config.hidden_size))
    jac = jax.jit(jax.jacrev(projected_logits_T))(noise, state)
    norms_TxS = np.linalg.norm(np.asarray(jac)[:, 0], axis=-1)[pad:]  # real query positions
    t = np.arange(pad, length)[:, None]
    s = np.arange(length)[None, :]
    blind = (s > t) | (s < pad)
    assert np.all(norms_TxS[blind] == 0.0)
    assert np.all(norms_TxS[~blind] > 0.0)


# ---------------------------------------------------------------- padding


@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_padding_does_not_change_real_logits(ckpt, family):
    """The same 60 tokens right-padded (row 0), left-padded (row 1) and followed by 40
    more real tokens (row 2, which by causality gives the unpadded logits) agree at the
    real positions. Pads are random tokens, not pad_token_id."""
    c = ckpt(family)
    rng = np.random.default_rng(8)
    real, tail = rng.integers(3, 128, 60), rng.integers(0, 128, (3, 40))
    ids = np.stack([np.r_[real, tail[0]], np.r_[tail[1], real], np.r_[real, tail[2]]])
    mask = np.ones((B, T), np.int32)
    mask[0, 60:] = mask[1, :40] = 0
    logits = np.asarray(_logits(c.model, ids, mask).logits)
    np.testing.assert_allclose(logits[0, :60], logits[2, :60], atol=1e-5, rtol=0)
    np.testing.assert_allclose(logits[1, 40:], logits[2, :60], atol=1e-5, rtol=0)


# -------------------------------------------------------- HiddenPerturbation


@pytest.mark.parametrize(
    "layer, relative", [(0, True), (0, False), pytest.param(-1, True, marks=pytest.mark.slow)]
)
def test_zero_perturbation_is_the_identity(ckpt, layer, relative):
    c = ckpt("qwen3")
    ids, mask = _batch(np.random.default_rng(9), "left")
    plain = _logits(c.model, ids, mask).logits
    pert = HiddenPerturbation(jnp.zeros((B, T, c.config.hidden_size)), layer, relative)
    np.testing.assert_array_equal(_logits(c.model, ids, mask, perturbation=pert).logits, plain)


@pytest.mark.parametrize(
    "layer, changed_until", [(0, None), pytest.param(-1, 6, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_perturbation_only_reaches_later_positions(ckpt, family, layer, changed_until):
    """Noise at positions 4..5 leaves positions < 4 bit-identical and moves every later one.

    After the last block (layer=-1) only the final norm and head remain, which
    act per position, so there it moves positions 4..5 alone.
    """
    c = ckpt(family)
    ids, mask = _batch(np.random.default_rng(10), "none")
    noise = np.zeros((B, T, c.config.hidden_size), np.float32)
    noise[:, 4:6] = np.random.default_rng(11).standard_normal((B, 2, c.config.hidden_size))
    plain = np.asarray(_logits(c.model, ids, mask).logits)
    pert = HiddenPerturbation(jnp.asarray(noise), layer=layer, relative_to_rms=True)
    moved = np.asarray(_logits(c.model, ids, mask, perturbation=pert).logits)
    delta_T = np.abs(moved - plain).max(axis=(0, 2))
    changed = np.zeros(T, bool)
    changed[4:changed_until] = True
    assert np.all(delta_T[~changed] == 0.0), delta_T
    assert np.all(delta_T[changed] > 1e-3), delta_T


@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_relative_noise_is_scaled_by_hidden_rms(ckpt, family):
    """relative_to_rms=True with noise n == absolute noise n * RMS(h), where h is the
    output of block 0 as transformers reports it (hidden_states[1], before any norm)."""
    c = ckpt(family)
    ids, mask = _batch(np.random.default_rng(12), "left")
    _, hf_hidden = _hf(c.torch_model, ids, mask)
    rms_BxTx1 = np.sqrt(np.mean(hf_hidden[1].astype(np.float64) ** 2, axis=-1, keepdims=True))
    noise = 0.5 * np.random.default_rng(13).standard_normal((B, T, c.config.hidden_size))

    def logits(noise, relative):
        pert = HiddenPerturbation(jnp.asarray(noise, jnp.float32), 0, relative_to_rms=relative)
        return _logits(c.model, ids, mask, perturbation=pert).logits

    relative = logits(noise, True)
    assert _max_err(relative, logits(noise * rms_BxTx1, False), mask) <= PARITY_TOL
    # The RMS is far from 1 here, so an unscaled implementation fails the check above.
    assert np.abs(np.log(rms_BxTx1[mask.astype(bool)])).min() > 0.5
    assert _max_err(relative, logits(noise, False), mask) > 1e-2


# --------------------------------------------------------------------- bf16


@pytest.mark.parametrize("family", _families("qwen3", "qwen2", "llama"))
def test_bf16_model_runs_and_tracks_f32(ckpt, family):
    c = ckpt(family)
    bf16_config = tiny_config(family, param_dtype="bfloat16", dtype="bfloat16")
    abstract = jax.tree.leaves(nnx.state(abstract_model(bf16_config), nnx.Param))
    assert {p.dtype for p in abstract} == {jnp.dtype(jnp.bfloat16)}
    # The checkpoint loaded as bf16 is exactly a model of the bf16 tiny config.
    model, config = load_pretrained(c.path, dtype=jnp.bfloat16)
    assert config == bf16_config
    assert {p.dtype for p in jax.tree.leaves(nnx.state(model, nnx.Param))} == {
        jnp.dtype(jnp.bfloat16)
    }
    ids, mask = _batch(np.random.default_rng(0), "left")
    out = _logits(model, ids, mask)
    assert out.logits.dtype == jnp.float32 and out.hidden.dtype == jnp.bfloat16
    # The f32 model on the same (bf16-representable) weights isolates bf16 compute;
    # the original f32 model adds the rounding of the weights.
    upcast = jax.tree.map(lambda p: p.astype(jnp.float32), nnx.state(model, nnx.Param))
    same_weights = nnx.merge(nnx.graphdef(c.model), upcast)
    err_compute = _max_err(out.logits, _logits(same_weights, ids, mask).logits, mask)
    err_total = _max_err(out.logits, _logits(c.model, ids, mask).logits, mask)
    print(f"bf16 {family}: max abs err {err_compute:.2e} (compute) {err_total:.2e} (total)")
    assert 0.0 < err_compute <= 5e-2  # bf16 keeps 8 mantissa bits; logits are O(1)
    assert err_total <= 5e-2


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_params_with_f32_compute_match_transformers_on_rounded_weights(ckpt, family):
    """compute_dtype=float32 on bf16 storage is exactly the f32 model of the rounded weights."""
    c = ckpt(family)
    model, config = load_pretrained(c.path, dtype=jnp.bfloat16, compute_dtype=jnp.float32)
    assert (config.param_dtype, config.dtype) == ("bfloat16", "float32")
    rounded = type(c.torch_model)(c.torch_model.config).eval()
    rounded.load_state_dict(
        {k: v.to(torch.bfloat16).float() for k, v in c.torch_model.state_dict().items()}
    )
    ids, mask = _batch(np.random.default_rng(15), "right")
    ref, _ = _hf(rounded, ids, mask)
    assert _max_err(_logits(model, ids, mask).logits, ref, mask) <= PARITY_TOL


# ---------------------------------------------------------------------- jit


def test_nnx_jit_compiles_once_per_shape(ckpt):
    c = ckpt("qwen3")
    traces = []

    @nnx.jit
    def logits(model, ids, mask):
        traces.append(ids.shape)
        return model(ids, mask)

    rng = np.random.default_rng(17)
    for _ in range(2):
        ids, mask = _batch(rng, "left")
        got = logits(c.model, jnp.asarray(ids), jnp.asarray(mask))
        assert _max_err(got, _logits(c.model, ids, mask).logits, mask) <= 1e-5
    assert len(traces) == 1


def test_jax_jit_of_split_state_decodes_with_one_trace(ckpt):
    """A jax.jit decode step on (state, cache, token) traces once for every step:
    cache.index is traced, not static, so decoding never recompiles."""
    c = ckpt("qwen3")
    graphdef, state = nnx.split(c.model)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def decode_step(state, cache, token_Bx1):
        out = nnx.merge(graphdef, state).forward(
            token_Bx1, jnp.ones_like(token_Bx1), cache=cache, logits="last"
        )
        return out.logits[:, 0], out.cache

    prompt, prompt_mask, gen, out = _cache_case(c, seed=19)
    full_mask = np.concatenate([prompt_mask, np.ones_like(gen)], axis=1)
    full = _logits(c.model, np.concatenate([prompt, gen], 1), full_mask).logits
    cache = out.cache
    for i in range(GEN):
        step_logits, cache = decode_step(state, cache, jnp.asarray(gen[:, i : i + 1]))
        np.testing.assert_allclose(step_logits, full[:, PROMPT + i], atol=CACHE_TOL, rtol=0)
    with pytest.raises(AssertionError):  # a new shape is a second trace: the counter is live
        decode_step(state, KVCache.zeros(c.config, 1, 4), jnp.ones((1, 1), jnp.int32))


@pytest.mark.parametrize(
    "family",
    [
        "qwen3",
        "qwen2",
        "llama",
    ],
)
def test_graphdef_and_config_are_hashable_static_args(ckpt, family):
    c = ckpt(family)
    assert hash(c.config) == hash(tiny_config(family))
    hash(nnx.graphdef(c.model))
