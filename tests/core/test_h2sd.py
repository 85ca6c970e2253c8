import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import h2sd


def _inputs(rng, b, t):
    adv = np.repeat(rng.normal(size=(b, 1)), t, 1).astype(np.float32)
    teacher = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    student = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.7
    mask[rng.integers(0, b)] = False
    teacher[~mask] = -np.inf
    correct = rng.random(b) < 0.5
    return adv * mask, teacher, student, correct, mask


def _ref(adv, teacher, student, correct, mask, low, high, renorm, beta, lam):
    b, t = mask.shape
    out = np.zeros((b, t))
    for i in range(b):
        idx = [j for j in range(t) if mask[i, j]]
        r = {j: float(teacher[i, j]) - float(student[i, j]) for j in idx}
        w = {j: min(max(math.exp(r[j]), low), high) for j in idx}
        if renorm and idx:
            mean = sum(w.values()) / len(idx)
            w = {j: v / mean for j, v in w.items()}
        for j in idx:
            out[i, j] = adv[i, j] * w[j] if correct[i] else beta * adv[i, j] + lam * r[j]
    return out


@pytest.mark.parametrize("shape", [(1, 1), (5, 6), (8, 11)])
@pytest.mark.parametrize("renorm", [False, True])
def test_h2sd_matches_loop_reference(shape, renorm):
    rng = np.random.default_rng(shape[1] + renorm)
    args = _inputs(rng, *shape)
    got = h2sd.h2sd_advantages(
        *args, low=0.6, high=1.8, renorm=renorm, fail_rl_coef=0.5, kl_coef=2.0
    )
    want = _ref(*args, 0.6, 1.8, renorm, 0.5, 2.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_h2sd_hand_computed():
    teacher = np.log(np.array([[0.8, 0.1], [0.5, 0.5]], np.float32))
    student = np.log(np.array([[0.2, 0.1], [0.25, 0.5]], np.float32))
    adv = np.array([[1.0, 1.0], [-1.0, -1.0]], np.float32)
    got = h2sd.h2sd_advantages(adv, teacher, student, np.array([True, False]), np.ones((2, 2)))
    # Success: w = [clip(4) = 2, 1] / mean 1.5. Failure: −1 + [log 2, 0].
    np.testing.assert_allclose(np.asarray(got), [[4 / 3, 2 / 3], [-1 + math.log(2), -1]], atol=1e-6)


_H2SD = jax.jit(h2sd.h2sd_advantages)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_success_rows_keep_sign_and_budget(seed):
    rng = np.random.default_rng(seed)
    adv, teacher, student, correct, mask = _inputs(rng, 6, 7)
    got = np.asarray(_H2SD(adv, teacher, student, correct, mask))
    ok = correct[:, None] & mask
    assert np.all(np.sign(got[ok]) == np.sign(adv[ok]))
    np.testing.assert_allclose(got[correct].sum(1), adv[correct].sum(1), rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(got)) and np.all(got[~mask] == 0)


def test_full_reverse_kl_value_and_gradient():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 3, 5)).astype(np.float32)
    tl = rng.normal(size=(2, 3, 5))
    logp = (tl - np.log(np.exp(tl).sum(-1, keepdims=True))).astype(np.float32)
    mask = np.array([[1, 1, 0], [0, 1, 1]], bool)
    q = np.exp(z - z.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    kl = (q * (np.log(q) - logp)).sum(-1)
    got = h2sd.full_reverse_kl(z, logp, mask)
    np.testing.assert_allclose(np.asarray(got), kl * mask, rtol=1e-5, atol=1e-6)
    # d KL / d z_v = q_v (log q_v − log p_v − KL), on masked-in tokens.
    g = jax.grad(lambda zz: jnp.sum(h2sd.full_reverse_kl(zz, logp, mask)))(z)
    want = q * (np.log(q) - logp - kl[..., None]) * mask[..., None]
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-6)
    loss = h2sd.full_reverse_kl_loss(z, logp, np.array([True, False]), mask, coef=2.0)
    np.testing.assert_allclose(np.asarray(loss), [[0, 0, 0], 2 * kl[1] * mask[1]], rtol=1e-5)
    assert float(h2sd.full_reverse_kl(logp, logp, mask).max()) < 1e-6


def test_sampled_reverse_kl_loss_value_and_gradient():
    lp = np.array([[-1.0, -2.0, -0.5]], np.float32)
    old = np.array([[-1.2, -2.0, -0.1]], np.float32)
    teach = np.array([[-0.3, -2.5, -9.0]], np.float32)
    mask = np.array([[1, 1, 0]], bool)
    val = h2sd.sampled_reverse_kl_loss(lp, old, teach, mask)
    rho = np.exp(lp - old)
    np.testing.assert_allclose(np.asarray(val), [[rho[0, 0] * -0.7, 0.5, 0]], rtol=1e-6)
    g = jax.grad(lambda x: jnp.sum(h2sd.sampled_reverse_kl_loss(x, old, teach, mask)))(lp)
    np.testing.assert_allclose(np.asarray(g), [[rho[0, 0] * -0.7, 0.5, 0]], rtol=1e-6)
