import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import opd

SHAPES = [(1, 1), (3, 5), (8, 13)]


def _inputs(rng, b, t):
    teacher = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    student = rng.normal(-1.5, 1.0, (b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.7
    mask[rng.integers(0, b)] = False  # a fully masked row
    # Padding holds -inf / NaN: kernels must not read it.
    teacher[~mask] = -np.inf
    student[~mask] = np.nan
    correct = rng.random(b) < 0.5
    seq_adv = rng.normal(size=b).astype(np.float32)
    return teacher, student, mask, correct, seq_adv


def _opdvr_ref(teacher, student, correct, mask, gate, seq_adv, u):
    b, t = mask.shape
    out = np.zeros((b, t))
    for i in range(b):
        for j in range(t):
            if not mask[i, j]:
                continue
            r = float(teacher[i, j]) - float(student[i, j])
            keep_pos = correct[i] if gate == "relu" else not correct[i]
            if gate != "none":
                r = max(r, 0.0) if keep_pos else min(r, 0.0)
            if seq_adv is not None:
                r *= abs(float(seq_adv[i])) + u
            out[i, j] = r
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", opd.OPDVR_GATES)
@pytest.mark.parametrize("grpd", [False, True])
def test_opdvr_matches_loop_reference(shape, gate, grpd):
    rng = np.random.default_rng(hash((shape, gate, grpd)) % 2**32)
    teacher, student, mask, correct, seq_adv = _inputs(rng, *shape)
    sa = seq_adv if grpd else None
    got = jax.jit(opd.opdvr_advantages, static_argnames="gate")(
        teacher, student, correct, mask, gate=gate, seq_adv_B=sa, u=0.3
    )
    want = _opdvr_ref(teacher, student, correct, mask, gate, sa, 0.3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(np.asarray(got)))


def test_opdvr_hand_computed():
    teacher = np.log(np.array([[0.5, 0.1, 0.2], [0.5, 0.1, 0.2]], np.float32))
    student = np.log(np.array([[0.25, 0.2, 0.2], [0.25, 0.2, 0.2]], np.float32))
    mask = np.array([[1, 1, 1], [1, 1, 0]], bool)
    correct = np.array([True, False])
    # r = [log 2, -log 2, 0] on both rows; correct keeps +, wrong keeps -.
    l2 = math.log(2)
    got = opd.opdvr_advantages(teacher, student, correct, mask)
    np.testing.assert_allclose(np.asarray(got), [[l2, 0, 0], [0, -l2, 0]], atol=1e-6)
    got = opd.opdvr_advantages(teacher, student, correct, mask, gate="inverted")
    np.testing.assert_allclose(np.asarray(got), [[0, -l2, 0], [l2, 0, 0]], atol=1e-6)
    got = opd.opdvr_advantages(
        teacher, student, correct, mask, seq_adv_B=np.array([-1.5, 0.0]), u=0.5
    )
    np.testing.assert_allclose(np.asarray(got), [[2 * l2, 0, 0], [0, -0.5 * l2, 0]], atol=1e-6)


_OPDVR = jax.jit(opd.opdvr_advantages, static_argnames="gate")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**31 - 1), st.floats(0.0, 2.0))
def test_opdvr_sign_constraints(b, t, seed, u):
    # One padded shape (one compile); b x t is the live block, the rest masked.
    rng = np.random.default_rng(seed)
    teacher, student, mask, correct, seq_adv = _inputs(rng, 6, 7)
    mask[b:] = False
    mask[:, t:] = False
    for sa in (None, seq_adv):
        a = np.asarray(_OPDVR(teacher, student, correct, mask, seq_adv_B=sa, u=u))
        assert np.all(a[correct] >= 0) and np.all(a[~correct] <= 0)
        assert np.all(a[~mask] == 0) and np.all(np.isfinite(a))


def test_sequence_advantage_recovers_broadcast_values():
    mask = np.array([[1, 1, 0], [0, 0, 0], [0, 1, 1]], bool)
    adv = np.where(mask, np.array([[2.0], [5.0], [-1.0]]), 0.0)
    np.testing.assert_allclose(np.asarray(opd.sequence_advantage(adv, mask)), [2, 0, -1])


@pytest.mark.parametrize("shape", SHAPES)
def test_joint_baselines_match_loop_reference(shape):
    rng = np.random.default_rng(7)
    teacher, student, mask, _, _ = _inputs(rng, *shape)
    adv = rng.normal(size=shape).astype(np.float32)
    add = np.asarray(opd.weighted_additive_advantages(adv, teacher, student, mask, weight=0.7))
    res = np.asarray(
        opd.teacher_modulated_advantages(adv, teacher, student, mask, low=0.6, high=1.5)
    )
    for i in range(shape[0]):
        for j in range(shape[1]):
            if not mask[i, j]:
                assert add[i, j] == 0 and res[i, j] == 0
                continue
            r = float(teacher[i, j]) - float(student[i, j])
            assert add[i, j] == pytest.approx(adv[i, j] + 0.7 * r, abs=1e-6)
            f = min(max(math.exp(r), 0.6), 1.5)
            assert res[i, j] == pytest.approx(adv[i, j] * f, rel=1e-6, abs=1e-6)
            assert np.sign(res[i, j]) == np.sign(adv[i, j])


def test_teacher_modulated_clip_is_finite_for_huge_ratios():
    teacher = np.array([[0.0, -1e4]], np.float32)
    student = np.array([[-1e4, 0.0]], np.float32)
    got = opd.teacher_modulated_advantages(np.ones((1, 2)), teacher, student, np.ones((1, 2)))
    np.testing.assert_allclose(np.asarray(got), [[2.0, 0.5]], rtol=1e-6)


def test_opd_plateaued():
    assert not opd.opd_plateaued([0.1, 0.2, 0.3], patience=3)
    assert opd.opd_plateaued([0.1, 0.5, 0.5, 0.49, 0.5], patience=3)
    assert not opd.opd_plateaued([0.1, 0.5, 0.5, 0.49, 0.52], patience=3, delta=0.01)
    assert opd.opd_plateaued([0.1, 0.5, 0.5, 0.49, 0.505], patience=3, delta=0.01)
    with pytest.raises(ValueError, match="patience"):
        opd.opd_plateaued([1.0], patience=0)
    with pytest.raises(ValueError, match="relu"):
        opd.opdvr_advantages(np.zeros((1, 1)), np.zeros((1, 1)), [True], [[1]], gate="relu6")


# ------------------------------------------------------------ distribution-level KL
def _kl_inputs(seed=0, b=2, t=3, d=5, e=4, v=37):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    return f(b, t, d), f(d, v), f(b, t, e), f(e, v)


def test_topk_kl_over_the_teachers_support_by_reference():
    h, w, _, _ = _kl_inputs(v=37)
    _, ids = jax.lax.top_k(h @ w, 4)
    logits = opd.gather_logits(h, w, ids)
    np.testing.assert_allclose(logits, np.take_along_axis(h @ w, np.asarray(ids), -1), atol=1e-5)
    # KL over the top-k support, both renormalised on it, by hand.
    teacher = np.log(np.array([[[0.5, 0.3, 0.1, 0.1]]], np.float32))
    student = np.log(np.array([[[0.25, 0.25, 0.25, 0.25]]], np.float32))
    want = np.sum(0.25 * (np.log(0.25) - np.log([0.5, 0.3, 0.1, 0.1])))
    np.testing.assert_allclose(opd.topk_reverse_kl(student, teacher), [[want]], rtol=1e-5)
    # The teacher's top-k mass need not be 1: it is renormalised first.
    np.testing.assert_allclose(opd.topk_reverse_kl(student, teacher - 2.0), [[want]], rtol=1e-5)
