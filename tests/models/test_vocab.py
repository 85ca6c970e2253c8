"""Vocabulary-chunked kernels against NumPy (float64) and against autodiff of the unchunked math.

Chunk sizes cover one chunk, several, and a last chunk that runs past V. A jaxpr
walk checks the point of the exercise: no [B, T, V] array exists in the forward
or the backward pass when the chunk is smaller than V.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.models import scoring, vocab
from rlvr_jax.models.transformer import init_model
from rlvr_jax.testing import tiny_config

B, T, D, V = 2, 5, 8, 37
CHUNKS = [5, 8, 37, 100]  # last chunk past V (5, 8), exact, clamped to V


def _case(seed=0, dt=6):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(B, T, D))
    w = rng.normal(size=(D, V)) * 0.7
    ht, wt = rng.normal(size=(B, T, dt)), rng.normal(size=(dt, V)) * 0.7
    targets = rng.integers(0, V, (B, T))
    return h, w, ht, wt, targets, rng


def _np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _f32(*xs):
    return [jnp.asarray(x, jnp.float32) for x in xs]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_logp_and_entropy_match_numpy(chunk):
    h, w, _, _, targets, _ = _case()
    lp64 = _np_log_softmax(h @ w)
    ref_lp = np.take_along_axis(lp64, targets[..., None], -1)[..., 0]
    ref_ent = -(np.exp(lp64) * lp64).sum(-1)
    lp, ent = vocab.token_logp_entropy(*_f32(h, w), jnp.asarray(targets), chunk=chunk)
    np.testing.assert_allclose(lp, ref_lp, atol=2e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=2e-5)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_logp_and_entropy_grads_match_autodiff(chunk):
    h, w, _, _, targets, rng = _case(1)
    c_lp, c_ent = _f32(rng.normal(size=(B, T)), rng.normal(size=(B, T)))
    tg = jnp.asarray(targets)

    def unchunked(h, w):
        lp = jax.nn.log_softmax(h @ w)
        ent = -(jnp.exp(lp) * lp).sum(-1)
        return jnp.take_along_axis(lp, tg[..., None], -1)[..., 0], ent

    def loss(fn):
        return lambda h, w: jnp.sum(fn(h, w)[0] * c_lp + fn(h, w)[1] * c_ent)

    chunked = lambda h, w: vocab.token_logp_entropy(h, w, tg, chunk=chunk)  # noqa: E731
    ref = jax.grad(loss(unchunked), (0, 1))(*_f32(h, w))
    got = jax.grad(loss(chunked), (0, 1))(*_f32(h, w))
    for r, g in zip(ref, got, strict=True):
        np.testing.assert_allclose(g, r, atol=1e-5 * float(jnp.abs(r).max()) + 1e-6)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_topk_matches_numpy(chunk):
    h, w, _, _, _, _ = _case(2)
    lp64 = _np_log_softmax(h @ w)
    order = np.argsort(-lp64, axis=-1, kind="stable")[..., :4]
    lp, ids = vocab.topk_logps(*_f32(h, w), 4, chunk=min(chunk, V))
    np.testing.assert_array_equal(ids, order)
    np.testing.assert_allclose(lp, np.take_along_axis(lp64, order, -1), atol=2e-5)


def test_topk_rejects_k_above_the_chunk():
    h, w, *_ = _case()
    with pytest.raises(ValueError, match="k=9 must be in"):
        vocab.topk_logps(*_f32(h, w), 9, chunk=8)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_reverse_kl_matches_numpy_and_autodiff(chunk):
    h, w, ht, wt, _, rng = _case(3)
    ls, lt = _np_log_softmax(h @ w), _np_log_softmax(ht @ wt)
    ref = (np.exp(ls) * (ls - lt)).sum(-1)
    args = _f32(h, w, ht, wt)
    np.testing.assert_allclose(vocab.reverse_kl(*args, chunk=chunk), ref, atol=2e-5)
    cot = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)

    def unchunked(h, w, ht, wt):
        ls, lt = jax.nn.log_softmax(h @ w), jax.nn.log_softmax(jax.lax.stop_gradient(ht @ wt))
        return jnp.sum((jnp.exp(ls) * (ls - lt)).sum(-1) * cot)

    def chunked(h, w, ht, wt):
        return jnp.sum(vocab.reverse_kl(h, w, ht, wt, chunk=chunk) * cot)

    ref_g = jax.grad(unchunked, (0, 1, 2, 3))(*args)
    got = jax.grad(chunked, (0, 1, 2, 3))(*args)
    for r, g in zip(ref_g, got, strict=True):
        np.testing.assert_allclose(g, r, atol=1e-5 * float(jnp.abs(r).max() + 1) + 1e-6)
    assert float(jnp.abs(got[0]).max()) > 1e-3 and float(jnp.abs(got[2]).max()) == 0


def test_reverse_kl_rejects_different_vocabularies():
    h, w, ht, wt, *_ = _case()
    with pytest.raises(ValueError, match="vocabularies differ: 37 vs 36"):
        vocab.reverse_kl(*_f32(h, w, ht, wt[:, :-1]))


def _shapes(jaxpr, out):
    """Every shape computed anywhere in a (closed) jaxpr, sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            out.add(tuple(getattr(v.aval, "shape", ())))
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _shapes(inner, out)
    return out


def test_scoring_never_builds_full_vocabulary_logits():
    """token_logps of a V=512 model with chunk 128: value, grad and jaxpr check."""
    cfg = tiny_config("qwen3", vocab_size=512)
    model = init_model(cfg, seed=0)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(3, 512, (B, 12)), jnp.int32)
    mask = jnp.ones((B, 12), bool).at[0, :3].set(False)
    ref_lp, ref_ent = scoring.logps_from_logits(
        model(tokens, mask), tokens, mask, with_entropy=True
    )
    lp, ent = scoring.token_logps(model, tokens, mask, with_entropy=True, vocab_chunk=128)
    np.testing.assert_allclose(lp, ref_lp, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=1e-5)
    lp2, hidden = scoring.token_logps(model, tokens, mask, return_hidden=True, vocab_chunk=128)
    np.testing.assert_array_equal(lp2, lp)
    # Entry t of the hidden states predicts token t: it reproduces that token's log-prob.
    logits = hidden[:, 1:] @ model.output_kernel()
    lp3 = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)[..., 0]
    real = np.asarray(lp[:, 1:]) != 0
    np.testing.assert_allclose(np.asarray(lp3)[real], np.asarray(lp[:, 1:])[real], atol=1e-5)
    assert np.all(np.asarray(hidden[:, 0]) == 0)
    from flax import nnx

    graphdef, params = nnx.split(model)

    def loss(p):
        m = nnx.merge(graphdef, p)
        lp, ent = scoring.token_logps(m, tokens, mask, with_entropy=True, vocab_chunk=128)
        return jnp.sum(lp) + jnp.sum(ent)

    shapes = _shapes(jax.make_jaxpr(jax.grad(loss))(params).jaxpr, set())
    assert (B, 11, 128) in shapes  # the chunk is there
    # No per-token array over the whole vocabulary (the [D, V] kernel and its grad are fine).
    assert not [s for s in shapes if len(s) >= 2 and s[-1] == 512 and s[0] == B]


def test_topk_scoring_aligns_like_token_logps():
    cfg = tiny_config("qwen3")
    model = init_model(cfg, seed=1)
    tokens = jnp.asarray(np.random.default_rng(1).integers(3, 128, (B, 9)), jnp.int32)
    mask = jnp.ones((B, 9), bool).at[1, :2].set(False)
    lp, ids = scoring.topk_logps(model, tokens, mask, 3, vocab_chunk=32)
    full = jax.nn.log_softmax(model(tokens, mask)[:, :-1], -1)
    ref_lp, ref_ids = jax.lax.top_k(full, 3)
    m = np.asarray(mask)
    real = m[:, 1:] & (np.cumsum(m, axis=1)[:, :-1] > 0)  # tokens with a real context
    np.testing.assert_allclose(np.asarray(lp[:, 1:])[real], np.asarray(ref_lp)[real], atol=1e-5)
    np.testing.assert_array_equal(np.asarray(ids[:, 1:])[real], np.asarray(ref_ids)[real])
    # Position 0, the padding and the first real token after it (no context) are 0.
    assert np.all(np.asarray(lp[:, 0]) == 0) and np.all(np.asarray(lp[1, :3]) == 0)
