import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import cpo, opd


def _inputs(rng, b, t):
    adv = np.repeat(rng.normal(size=(b, 1)), t, 1).astype(np.float32)
    adv[rng.random(b) < 0.3] = 0.0  # zero-variance groups
    guided = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    plain = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    ent = rng.gamma(1.0, 1.0, (b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.7
    mask[rng.integers(0, b)] = False
    guided[~mask] = -np.inf
    ent[~mask] = np.nan
    correct = rng.random(b) < 0.5
    return adv * mask, guided, plain, ent, mask, correct


@pytest.mark.parametrize("shape", [(1, 1), (4, 6), (9, 3)])
@pytest.mark.parametrize("tau", [0.0, 0.5])
def test_cpo_matches_loop_reference(shape, tau):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    adv, guided, plain, _, mask, correct = _inputs(rng, *shape)
    got = np.asarray(
        cpo.cpo_advantages(
            adv, guided, plain, correct, mask, beta=0.8, lam_correct=0.3, lam_wrong=0.7, tau=tau
        )
    )
    for i in range(shape[0]):
        for j in range(shape[1]):
            if not mask[i, j]:
                assert got[i, j] == 0
                continue
            d = float(guided[i, j]) - float(plain[i, j])
            if tau:
                d = tau * math.tanh(d / tau)
            lam = 0.3 if correct[i] else 0.7
            assert got[i, j] == pytest.approx(0.8 * adv[i, j] + lam * d, rel=1e-6, abs=1e-6)


def test_cpo_reduces_to_opd_with_an_external_teacher():
    rng = np.random.default_rng(3)
    adv, teacher, student, _, mask, correct = _inputs(rng, 6, 8)
    got = cpo.cpo_advantages(
        adv, teacher, student, correct, mask, beta=0.0, lam_correct=1.0, lam_wrong=1.0, tau=0.0
    )
    want = opd.opdvr_advantages(teacher, student, correct, mask, gate="none")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_allclose(
        np.asarray(got), np.where(mask, teacher.astype(np.float64) - student, 0), atol=1e-6
    )


def test_cpo_gives_signal_in_zero_variance_groups():
    mask = np.ones((2, 2), bool)
    got = cpo.cpo_advantages(
        np.zeros((2, 2)),
        np.log([[0.5, 0.5], [0.5, 0.5]]),
        np.log([[0.25, 0.5], [0.25, 0.5]]),
        np.array([True, False]),
        mask,
        lam_correct=0.1,
        lam_wrong=0.2,
        tau=0.0,
    )
    l2 = math.log(2)
    np.testing.assert_allclose(np.asarray(got), [[0.1 * l2, 0], [0.2 * l2, 0]], atol=1e-7)


def test_entropy_shaping_hand_computed():
    adv = np.array([[1.0, 1.0, -1.0, 0.0]], np.float32)
    ent = np.array([[0.5, 3.0, 3.0, 2.0]], np.float32)
    got = cpo.entropy_shaped_advantages(adv, ent, np.ones((1, 4), bool))
    # ψ = min(0.4·H, |A|/2): 0.2, 0.5, 0.5, 0.
    np.testing.assert_allclose(np.asarray(got), [[1.2, 1.5, -0.5, 0.0]], atol=1e-6)


_SHAPE = jax.jit(cpo.entropy_shaped_advantages)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 5.0), st.floats(1.01, 10.0))
def test_entropy_shaping_keeps_signs_and_matches_reference(seed, alpha, kappa):
    rng = np.random.default_rng(seed)
    _, _, _, ent, mask, _ = _inputs(rng, 5, 6)
    adv = (rng.normal(size=(5, 6)) * mask).astype(np.float32)
    got = np.asarray(_SHAPE(adv, ent, mask, alpha=alpha, kappa=kappa))
    want = np.where(mask, adv + np.minimum(alpha * np.nan_to_num(ent), np.abs(adv) / kappa), 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.all(np.sign(got) == np.sign(adv))
