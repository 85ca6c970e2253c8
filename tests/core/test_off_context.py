"""Off-context surrogate (OC-GRPO, LSPO) against NumPy loops, hand cases, edges, gradients."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import losses
from rlvr_jax.core.off_context import off_context_objective, off_context_weights

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)
STATIC = ("level", "length_normalise")


@functools.partial(jax.jit, static_argnames=STATIC)
def _objective(lp, old, beh, adv, mask, cap, floor, level="token", length_normalise=True):
    return off_context_objective(
        lp, old, beh, adv, mask, level=level, cap=cap, floor=floor,
        length_normalise=length_normalise, eps_low=0.2, eps_high=0.28,
    )  # fmt: skip


@jax.jit
def _ppo(lp, old, adv, mask):
    return losses.ppo_clip_objective(lp, old, adv, mask, eps_low=0.2, eps_high=0.28)


def reference(lp, old, beh, adv, mask, cap, floor, level, norm, eps_low=0.2, eps_high=0.28):
    b, t = mask.shape
    loss = np.zeros((b, t))
    weight = np.zeros((b, t))
    for i in range(b):
        cols = [j for j in range(t) if mask[i, j]]
        seq = sum(float(old[i, j]) - float(beh[i, j]) for j in cols)
        if norm and cols:
            seq /= len(cols)
        for j in cols:
            log_w = seq if level == "sequence" else float(old[i, j]) - float(beh[i, j])
            w = min(max(np.exp(log_w), floor), cap)
            rho = np.exp(float(lp[i, j]) - float(old[i, j]))
            a = float(adv[i, j])
            obj = min(rho * a, np.clip(rho, 1 - eps_low, 1 + eps_high) * a)
            loss[i, j], weight[i, j] = -w * obj, w
    return loss, weight


def _case(rng, b, t):
    mask = rng.random((b, t)) < 0.75
    old = rng.normal(-1.0, 0.5, (b, t)).astype(np.float32)
    lp = (old + rng.normal(0, 0.3, (b, t))).astype(np.float32)
    beh = (old + rng.normal(0, 0.6, (b, t))).astype(np.float32)
    adv = rng.normal(size=(b, t)).astype(np.float32)
    return lp, old, beh, adv, mask


@pytest.mark.parametrize("shape", [(4, 6), (9, 17), (2, 1)])
@pytest.mark.parametrize("level,norm", [("token", True), ("sequence", True), ("sequence", False)])
def test_matches_numpy_loop(shape, level, norm):
    rng = np.random.default_rng(sum(shape))
    lp, old, beh, adv, mask = _case(rng, *shape)
    loss, stats = _objective(lp, old, beh, adv, mask, 1.5, 0.2, level=level,
                             length_normalise=norm)  # fmt: skip
    want_loss, want_w = reference(lp, old, beh, adv, mask, 1.5, 0.2, level, norm)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)  # exp of f32 sums
    np.testing.assert_allclose(stats["is_weight_BxT"], want_w, rtol=1e-5, atol=1e-6)


def test_hand_computed():
    # Token 0: π_old/μ = e^{ln 3} = 3 → capped at 2; token 1: e^{−ln 2} = .5.
    # ρ = 1 (θ = old), A = 1: loss = −w.  Sequence (normalised): exp((ln 3 − ln 2)/2) = √1.5.
    old = np.zeros((1, 2), np.float32)
    beh = np.array([[-np.log(3.0), np.log(2.0)]], np.float32)
    adv = np.ones((1, 2), np.float32)
    mask = np.ones((1, 2), bool)
    loss, stats = _objective(old, old, beh, adv, mask, 2.0, 0.0)
    np.testing.assert_allclose(loss, [[-2.0, -0.5]], **TOL)
    np.testing.assert_array_equal(stats["is_truncated_BxT"], [[1, 0]])
    loss, _ = _objective(old, old, beh, adv, mask, 2.0, 0.0, level="sequence")
    np.testing.assert_allclose(loss, [[-np.sqrt(1.5)] * 2], **TOL)
    loss, _ = _objective(old, old, beh, adv, mask, 2.0, 0.0, level="sequence",
                         length_normalise=False)  # fmt: skip
    np.testing.assert_allclose(loss, [[-1.5] * 2], **TOL)


def test_on_policy_rows_reduce_to_ppo_clip():
    rng = np.random.default_rng(3)
    lp, old, _, adv, mask = _case(rng, 4, 6)
    ppo, _ = _ppo(lp, old, adv, mask)
    for level in ("token", "sequence"):
        loss, stats = _objective(lp, old, old, adv, mask, 2.0, 0.0, level=level)
        np.testing.assert_allclose(loss, ppo, **TOL)
        np.testing.assert_array_equal(stats["is_weight_BxT"], mask.astype(np.float32))


def test_edge_cases_no_nan_and_errors():
    mask = np.array([[0, 0], [1, 0]], bool)
    nan = np.full((2, 2), np.nan, np.float32)
    vals = np.array([[0, 0], [-1.0, 0]], np.float32)
    lp = np.where(mask, vals, nan)
    for level in ("token", "sequence"):
        loss, stats = _objective(lp, lp, np.where(mask, vals - 100, -np.inf), np.ones((2, 2)),
                                 mask, 2.0, 0.0, level=level)  # fmt: skip
        assert np.isfinite(np.asarray(loss)).all()
        np.testing.assert_allclose(loss, [[0, 0], [-2.0, 0]])  # huge ratio truncated at C
    with pytest.raises(ValueError, match="level"):
        off_context_weights(vals, vals, mask, level="row")
    with pytest.raises(ValueError, match="floor"):
        off_context_weights(vals, vals, mask, cap=1.0, floor=2.0)


@PROPS
@given(st.integers(0, 2**32 - 1), st.sampled_from(["token", "sequence"]))
def test_weights_are_bounded_constants(seed, level):
    rng = np.random.default_rng(seed)
    lp, old, beh, adv, mask = _case(rng, 4, 6)
    _, stats = _objective(lp, old, beh, adv, mask, 1.5, 0.1, level=level)
    w = np.asarray(stats["is_weight_BxT"])
    assert (w[mask] >= 0.1 - 1e-7).all() and (w[mask] <= 1.5 + 1e-6).all()
    assert (w[~mask] == 0).all()

    # The gradient is w × the PPO gradient: the weight is a stop-gradient constant.
    got, want = _grads(jnp.asarray(lp), old, beh, adv, mask, w, level=level)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@functools.partial(jax.jit, static_argnames="level")
def _grads(lp, old, beh, adv, mask, w, level):
    def total(x):
        return _objective(x, old, beh, adv, mask, 1.5, 0.1, level=level)[0].sum()

    def weighted_ppo(x):
        return (_ppo(x, old, adv, mask)[0] * w).sum()

    return jax.grad(total)(lp), jax.grad(weighted_ppo)(lp)
