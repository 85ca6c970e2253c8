"""ISO-Merger: λ = (1, 0) returns the first ISO specialist, the base spectrum is kept,
complementary specialists are both recovered."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlvr_jax.optim import HF_INCLUDE, build_optimizer, iso_merge, task_vector_merge
from rlvr_jax.optim.iso import flatten

PATHS = ("a/q_proj/kernel", "b/up_proj/kernel")


def _base():
    rng = np.random.default_rng(0)
    return {
        "a": {"q_proj": {"kernel": jnp.asarray(rng.normal(size=(12, 6)), jnp.float32)}},
        "b": {"up_proj": {"kernel": jnp.asarray(rng.normal(size=(6, 10)), jnp.float32)}},
        "norm": {"weight": jnp.ones((6,), jnp.float32)},
    }


def _specialist(base, seed, include=r"(q_proj|up_proj)/kernel$", steps=20):
    """ISO-trained from `base` on random gradients (only `include` matrices and the norm move)."""
    opt = build_optimizer(5e-2, steps, name="iso", iso=dict(include=include), clip_norm=0.0)
    p, st = base, opt.init(base)
    for i in range(steps):
        key = jax.random.PRNGKey(seed * 1000 + i)
        g = jax.tree.map(lambda x, key=key: jax.random.normal(key, x.shape), p)
        upd, st = opt.update(g, st, p)
        p = optax.apply_updates(p, upd)
    return p


def _svals(x):
    return np.linalg.svd(np.asarray(x, np.float64), compute_uv=False)


def test_lambda_one_zero_returns_the_first_specialist():
    base = _base()
    s1, s2 = _specialist(base, 1), _specialist(base, 2)
    merged = iso_merge(base, [s1, s2], [1.0, 0.0])
    for path in PATHS:
        assert np.abs(flatten(s1)[path] - flatten(base)[path]).max() > 0.1
        np.testing.assert_allclose(flatten(merged)[path], flatten(s1)[path], atol=1e-5)
    np.testing.assert_allclose(merged["norm"]["weight"], s1["norm"]["weight"], atol=1e-6)
    np.testing.assert_allclose(
        flatten(iso_merge(base, [s1, s2], [0.0, 0.0]))[PATHS[0]],
        base["a"]["q_proj"]["kernel"],
        atol=1e-5,
    )


def test_merge_keeps_the_base_spectrum_even_for_non_iso_specialists():
    base = _base()
    s1 = _specialist(base, 1)
    s2 = jax.tree.map(lambda x: x * 1.3 + 0.1, base)  # plain fine-tune: spectrum changed
    merged = iso_merge(base, [s1, s2], [0.5, 0.5], retraction="qr")
    for path in PATHS:
        np.testing.assert_allclose(
            _svals(flatten(merged)[path]), _svals(flatten(base)[path]), rtol=1e-5
        )
        assert not np.allclose(flatten(merged)[path], flatten(base)[path], atol=1e-3)
    # Other params: task vectors W0 + Σ λ (W_k − W0).
    want = (
        base["norm"]["weight"] + 0.5 * (s1["norm"]["weight"] - 1) + 0.5 * (s2["norm"]["weight"] - 1)
    )
    np.testing.assert_allclose(merged["norm"]["weight"], want, atol=1e-6)


def test_complementary_specialists_are_both_recovered():
    """Specialist 1 moved only matrix a, specialist 2 only b: λ = (1, 1) holds both."""
    base = _base()
    s1 = _specialist(base, 1, include=r"q_proj/kernel$")
    s2 = _specialist(base, 2, include=r"up_proj/kernel$")
    # Outside its include a specialist's matrix moved as a plain AdamW param: undo that,
    # so each specialist touches exactly one matrix.
    s1["b"] = base["b"]
    s2["a"] = base["a"]
    merged = iso_merge(base, [s1, s2], [1.0, 1.0])
    np.testing.assert_allclose(
        merged["a"]["q_proj"]["kernel"], s1["a"]["q_proj"]["kernel"], atol=1e-5
    )
    np.testing.assert_allclose(
        merged["b"]["up_proj"]["kernel"], s2["b"]["up_proj"]["kernel"], atol=1e-5
    )


def test_merge_errors():
    base = _base()
    with pytest.raises(ValueError, match="2 specialists and 1 lambdas"):
        iso_merge(base, [base, base], [1.0])
    with pytest.raises(ValueError, match="specialist 0 does not have"):
        iso_merge(base, [{"a": base["a"]}], [1.0])


def test_merge_of_hf_tensor_dicts():
    """Flat {HF name: array} dicts ([out, in] layout) with HF_INCLUDE: as for param trees."""
    base = _base()
    s1, s2 = _specialist(base, 1), _specialist(base, 2)
    hf = lambda t: {  # noqa: E731
        "model.layers.0.self_attn.q_proj.weight": np.asarray(t["a"]["q_proj"]["kernel"]).T,
        "model.layers.0.mlp.up_proj.weight": np.asarray(t["b"]["up_proj"]["kernel"]).T,
        "model.norm.weight": np.asarray(t["norm"]["weight"]),
    }
    merged = iso_merge(hf(base), [hf(s1), hf(s2)], [0.5, 0.5], include=HF_INCLUDE)
    tree = iso_merge(base, [s1, s2], [0.5, 0.5])
    np.testing.assert_allclose(
        merged["model.layers.0.self_attn.q_proj.weight"],
        np.asarray(tree["a"]["q_proj"]["kernel"]).T,
        atol=1e-5,
    )
    np.testing.assert_allclose(merged["model.norm.weight"], tree["norm"]["weight"], atol=1e-6)


def test_task_vector_merge_is_task_arithmetic_everywhere():
    base = _base()
    s1, s2 = _specialist(base, 1), _specialist(base, 2)
    merged = flatten(task_vector_merge(base, [s1, s2], [0.3, 0.6]))
    f0, f1, f2 = flatten(base), flatten(s1), flatten(s2)
    for path in f0:
        want = f0[path] + 0.3 * (f1[path] - f0[path]) + 0.6 * (f2[path] - f0[path])
        np.testing.assert_allclose(merged[path], want, rtol=1e-5, atol=1e-6)
