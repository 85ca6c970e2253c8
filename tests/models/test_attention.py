"""Attention kernels: blockwise and (interpreted) splash equal the dense kernel, values and grads.

Oracle: `attention(..., impl="xla")`, the dense kernel the model has always used
(itself checked against transformers in test_transformer.py). Inputs are random
with random key-validity masks, left padding (queries that see no key), GQA, and
lengths that are not multiples of the block.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.models import attention as attention_module
from rlvr_jax.models.attention import attention, blockwise_attention

TOL = 1e-5


def _inputs(seed, b=3, t=37, s=None, n=4, k=2, h=8):
    rng = np.random.default_rng(seed)
    s = s or t
    q = jnp.asarray(rng.normal(size=(b, t, n, h)), jnp.float32)
    key = jnp.asarray(rng.normal(size=(b, k, h, s)), jnp.float32)
    val = jnp.asarray(rng.normal(size=(b, k, s, h)), jnp.float32)
    valid = rng.random((b, s)) > 0.3
    valid[1, :5] = False  # left padding: rows whose first queries see nothing
    valid[-1] = True
    return q, key, val, jnp.asarray(valid), rng


def _sees_a_key(valid_BxS, q_offset, t):
    """[B, T] bool: query t has at least one visible key (the rest are padding queries)."""
    seen = np.cumsum(np.asarray(valid_BxS), axis=1) > 0
    return seen[:, q_offset : q_offset + t]


def _max_err(a, b, rows_BxT):
    return float(np.abs(np.asarray(a) - np.asarray(b))[rows_BxT].max())


@pytest.mark.parametrize("block", [8, 64])  # 5 padded blocks of 8; one block
def test_blockwise_equals_dense_values_and_grads(block):
    q, key, val, valid, rng = _inputs(0)
    rows = _sees_a_key(valid, 0, q.shape[1])
    run = {
        impl: jax.jit(
            lambda q, k, v, impl=impl: attention(q, k, v, valid, 0, impl=impl, block=block)
        )
        for impl in ("xla", "blockwise")
    }
    ref, out = run["xla"](q, key, val), run["blockwise"](q, key, val)
    assert _max_err(out, ref, rows) <= TOL
    # Padding queries see nothing: zeros, not NaN.
    assert np.all(np.asarray(out)[~rows] == 0)
    cot = jnp.asarray(rng.normal(size=out.shape), jnp.float32) * rows[:, :, None, None]
    grads = {
        impl: jax.grad(lambda *a, f=f: jnp.sum(f(*a) * cot), argnums=(0, 1, 2))(q, key, val)
        for impl, f in run.items()
    }
    for name, g_ref, g in zip("qkv", grads["xla"], grads["blockwise"], strict=True):
        err = float(jnp.abs(g_ref - g).max())
        assert err <= TOL, f"d{name}: {err}"
        assert float(jnp.abs(g_ref).max()) > 0.1  # gradients are not trivially zero


@pytest.mark.parametrize("q_offset,t", [(0, 9), (13, 1), (20, 5), (39, 1)])
def test_blockwise_with_a_cache_offset_equals_dense(q_offset, t):
    """Prefill and decode: T new queries at slot q_offset of an S = 40 slot cache."""
    q, key, val, valid, _ = _inputs(1, t=t, s=40)
    rows = _sees_a_key(valid, q_offset, t)
    ref = attention(q, key, val, valid, jnp.int32(q_offset), impl="xla")
    out = jax.jit(functools.partial(attention, impl="blockwise", block=8))(
        q, key, val, valid, jnp.int32(q_offset)
    )
    assert _max_err(out, ref, rows) <= TOL


def test_blockwise_never_reads_slots_past_the_query():
    """Keys past the last query slot (the unfilled cache) are not read: NaNs there are harmless."""
    q, key, val, valid, _ = _inputs(2, t=1, s=64)
    poisoned_k = key.at[..., 24:].set(jnp.nan)
    poisoned_v = val.at[:, :, 24:].set(jnp.nan)
    out = attention(q, poisoned_k, poisoned_v, valid, jnp.int32(20), impl="blockwise", block=8)
    ref = attention(q, key, val, valid, jnp.int32(20), impl="xla")
    assert np.isfinite(np.asarray(out)).all()
    assert _max_err(out, ref, _sees_a_key(valid, 20, 1)) <= TOL


@pytest.mark.parametrize(
    "b,chunk_bytes,q_offset,t,s",
    [
        (4, 1, 0, 37, None),  # one row per pass, training shapes
        (4, 2048, 0, 37, None),  # two rows per pass (a score block is 1 KiB)
        (3, 2048, 0, 37, None),  # 3 rows: the largest divisor that fits is 1
        (4, 2048, 20, 5, 40),  # prefill/decode into a cache at an offset
    ],
)
def test_blockwise_in_row_chunks_equals_dense(monkeypatch, b, chunk_bytes, q_offset, t, s):
    """The CPU batch chunking (`lax.map` over rows) changes nothing: values and grads."""
    monkeypatch.setattr(attention_module, "CHUNK_BYTES", chunk_bytes)
    q, key, val, valid, rng = _inputs(7, b=b, t=t, s=s)
    rows = _sees_a_key(valid, q_offset, t)
    run = {
        impl: jax.jit(
            lambda q, k, v, impl=impl: attention(
                q, k, v, valid, jnp.int32(q_offset), impl=impl, block=8
            )  # fmt: skip
        )
        for impl in ("xla", "blockwise")
    }
    ref, out = run["xla"](q, key, val), run["blockwise"](q, key, val)
    assert _max_err(out, ref, rows) <= TOL
    cot = jnp.asarray(rng.normal(size=out.shape), jnp.float32) * rows[:, :, None, None]
    grads = {
        impl: jax.grad(lambda *a, f=f: jnp.sum(f(*a) * cot), argnums=(0, 1, 2))(q, key, val)
        for impl, f in run.items()
    }
    for name, g_ref, g in zip("qkv", grads["xla"], grads["blockwise"], strict=True):
        assert float(jnp.abs(g_ref - g).max()) <= TOL, f"d{name}"
        assert float(jnp.abs(g_ref).max()) > 0.1


def test_blockwise_rows_must_divide_the_batch():
    q = jnp.zeros((3, 2, 8, 4))
    k, v = jnp.zeros((3, 2, 4, 8)), jnp.zeros((3, 2, 8, 4))
    with pytest.raises(ValueError, match="rows=2 must divide the batch 3"):
        blockwise_attention(q, k, v, jnp.ones((3, 8), bool), 0, groups=1, block=4, rows=2)


def test_blockwise_bf16_tracks_f32():
    q, key, val, valid, _ = _inputs(3)
    rows = _sees_a_key(valid, 0, q.shape[1])
    ref = attention(q, key, val, valid, impl="xla")
    bf = [x.astype(jnp.bfloat16) for x in (q, key, val)]
    out = attention(*bf, valid, impl="blockwise", block=8)
    assert out.dtype == jnp.bfloat16
    assert _max_err(out.astype(jnp.float32), ref, rows) < 0.05


def test_pallas_falls_back_to_blockwise_off_tpu():
    q, key, val, valid, _ = _inputs(4)
    a = attention(q, key, val, valid, impl="pallas", block=8)
    b = attention(q, key, val, valid, impl="blockwise", block=8)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_auto_resolves_by_key_slots():
    """Below AUTO_MIN_KEYS the dense kernel, from it on blockwise with AUTO_BLOCK (pallas
    on a TPU); the other choices are themselves."""
    resolve, lo = attention_module.resolve, attention_module.AUTO_MIN_KEYS
    assert resolve("auto", 512, lo - 1, "cpu") == ("xla", 512)
    assert resolve("auto", 512, lo, "cpu") == ("blockwise", attention_module.AUTO_BLOCK)
    assert resolve("auto", 512, 4 * lo, "gpu") == ("blockwise", attention_module.AUTO_BLOCK)
    assert resolve("auto", 512, lo, "tpu") == ("pallas", attention_module.AUTO_BLOCK)
    assert resolve("auto", 512, lo - 1, "tpu") == ("xla", 512)
    assert resolve("blockwise", 8, 10_000, "cpu") == ("blockwise", 8)
    with pytest.raises(ValueError, match="'dense'"):
        resolve("dense", 8, 10, "cpu")


@pytest.mark.parametrize("s, same_as", [(96, ("xla", 512)), (256, ("blockwise", 64))])
def test_auto_is_bitwise_the_kernel_it_resolves_to(s, same_as):
    """ "auto" adds no arithmetic: at 96 key slots it is the dense kernel, at 256 blockwise
    with block 64, bit for bit (values and gradients)."""
    q, key, val, valid, rng = _inputs(6, b=2, t=s, n=4, k=2, h=8)
    impl, block = same_as

    def run(kernel, blk):
        f = lambda q, k, v: attention(q, k, v, valid, impl=kernel, block=blk)  # noqa: E731
        cot = jnp.asarray(rng.normal(size=q.shape), jnp.float32)
        return f(q, key, val), jax.grad(lambda *a: jnp.sum(f(*a) * cot), argnums=(0, 1, 2))(
            q, key, val
        )

    rng_state = rng.bit_generator.state
    got = run("auto", 512)
    rng.bit_generator.state = rng_state
    want = run(impl, block)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if s >= attention_module.AUTO_MIN_KEYS:  # and not the dense kernel's numbers bit for bit
        dense = attention(q, key, val, valid, impl="xla")
        assert not np.array_equal(np.asarray(got[0]), np.asarray(dense))


def test_auto_cache_slots_round_to_its_block_only_when_blockwise():
    from rlvr_jax.sampling.generate import cache_slots
    from rlvr_jax.testing import tiny_config

    cfg = tiny_config(attention="auto", attention_block=512)
    assert cache_slots(cfg, 64, 64) == 128  # dense: no rounding
    assert cache_slots(cfg, 256, 44) == 320  # blockwise, block 64: 300 -> 320
    assert cache_slots(tiny_config(attention="xla"), 256, 44) == 300


def test_unknown_impl_lists_the_choices():
    q, key, val, valid, _ = _inputs(5)
    with pytest.raises(ValueError, match="'flash'.*xla.*blockwise.*pallas"):
        attention(q, key, val, valid, impl="flash")


@pytest.mark.slow
def test_splash_kernel_interpreted_equals_dense():
    """The TPU kernel itself, run by the Pallas interpreter on CPU (~30 s)."""
    from rlvr_jax.models import splash

    q, key, val, valid, rng = _inputs(6, b=2, t=128, n=4, k=2, h=128)
    # Splash masks padding by segment ids: a padding query attends to padding keys,
    # so only real queries are compared (the model never reads the others).
    rows = _sees_a_key(valid, 0, 128) & np.asarray(valid)
    ref = attention(q, key, val, valid, impl="xla")
    out = splash.attention(q, key, val, valid, interpret=True)
    assert _max_err(out, ref, rows) <= TOL
    cot = jnp.asarray(rng.normal(size=out.shape), jnp.float32) * rows[:, :, None, None]
    g_ref = jax.grad(lambda *a: jnp.sum(attention(*a, valid, impl="xla") * cot), (0, 1, 2))(
        q, key, val
    )
    g = jax.grad(lambda *a: jnp.sum(splash.attention(*a, valid, interpret=True) * cot), (0, 1, 2))(
        q, key, val
    )
    for a, b in zip(g_ref, g, strict=True):
        assert float(jnp.abs(a - b).max()) <= 2 * TOL
