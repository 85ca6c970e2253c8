import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import opsa


def _inputs(rng, b, t):
    ent = rng.gamma(1.0, 1.0, (b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.7
    mask[rng.integers(0, b)] = False
    ent[~mask] = np.nan
    adv = rng.normal(size=(b, t)).astype(np.float32) * mask
    return adv, ent, mask


@pytest.mark.parametrize("shape", [(1, 1), (4, 6), (7, 9)])
@pytest.mark.parametrize("per_row", [False, True])
def test_opsa_matches_loop_reference(shape, per_row):
    rng = np.random.default_rng(shape[1])
    adv, ent, mask = _inputs(rng, *shape)
    got = np.asarray(opsa.opsa_advantages(adv, ent, mask, c=0.7, per_row=per_row, rl_coef=0.3))
    b, t = shape
    allh = [float(ent[i, j]) for i in range(b) for j in range(t) if mask[i, j]]
    for i in range(b):
        rowh = [float(ent[i, j]) for j in range(t) if mask[i, j]]
        hs = rowh if per_row else allh
        mean = sum(hs) / len(hs) if hs else 0.0
        for j in range(t):
            want = 0.0
            if mask[i, j]:
                want = 0.3 * adv[i, j] - 0.7 * (ent[i, j] / mean if mean > 0 else 0.0)
            assert got[i, j] == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_opsa_hand_computed_and_fixed_negative_ablation():
    ent = np.array([[1.0, 3.0], [0.0, 0.0]], np.float32)
    mask = np.array([[1, 1], [1, 0]], bool)
    got = opsa.opsa_advantages(np.zeros((2, 2)), ent, mask, c=2.0)
    np.testing.assert_allclose(np.asarray(got), [[-1.5, -4.5], [0, 0]], atol=1e-6)
    got = opsa.opsa_advantages(np.zeros((2, 2)), ent, mask, c=2.0, entropy_scaled=False)
    np.testing.assert_allclose(np.asarray(got), [[-2, -2], [-2, 0]])
    # Zero entropy everywhere: no signal, no NaN.
    got = opsa.opsa_advantages(np.zeros((2, 2)), np.zeros((2, 2)), mask)
    np.testing.assert_array_equal(np.asarray(got), np.zeros((2, 2)))


_OPSA = jax.jit(opsa.opsa_advantages)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.01, 5.0))
def test_opsa_is_negative_with_mean_minus_c(seed, c):
    rng = np.random.default_rng(seed)
    adv, ent, mask = _inputs(rng, 5, 6)
    got = np.asarray(_OPSA(adv, ent, mask, c=c))
    assert np.all(got <= 0) and np.all(got[~mask] == 0)
    if mask.any() and np.nansum(ent[mask]) > 0:
        assert got[mask].mean() == pytest.approx(-c, rel=1e-5)


def test_teacher_noise_mask_denoised_opd_and_stats():
    teacher = np.log(np.array([[0.5, 0.1, 1e-4], [0.5, 0.1, 0.2]], np.float32))
    student = np.log(np.array([[0.25, 0.2, 0.1], [0.25, 0.2, 0.2]], np.float32))
    correct = np.array([True, False])
    mask = np.array([[1, 1, 1], [1, 1, 0]], bool)
    noisy = opsa.teacher_noise_mask(teacher, student, correct, mask)
    np.testing.assert_array_equal(np.asarray(noisy), [[0, 1, 1], [1, 0, 0]])
    low = opsa.teacher_noise_mask(teacher, student, correct, mask, criterion="low_prob")
    np.testing.assert_array_equal(np.asarray(low), [[0, 0, 1], [0, 0, 0]])
    den = opsa.denoised_opd_advantages(teacher, student, correct, mask)
    np.testing.assert_allclose(np.asarray(den), [[np.log(2), 0, 0], [0, -np.log(2), 0]], atol=1e-6)
    s = opsa.teacher_noise_stats(teacher, student, correct, mask)
    np.testing.assert_allclose(
        [float(s["noise_frac"]), float(s["noise_frac_correct"]), float(s["noise_frac_wrong"])],
        [3 / 5, 2 / 3, 1 / 2],
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="verdict"):
        opsa.teacher_noise_mask(teacher, student, correct, mask, criterion="kl")
