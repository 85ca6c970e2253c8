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


def _agreement_reference(h, s, k, mask, tol):
    agree = decided = ap = dp = as_ = ds = at = at_n = rows_all = located = 0
    for i in range(h.shape[0]):
        cols = [j for j in range(h.shape[1]) if mask[i, j]]
        if k[i] < 0 or not cols:
            continue
        located += 1
        kk = min(k[i], len(cols) - 1)
        for pos, j in enumerate(cols):
            r = float(h[i, j]) - float(s[i, j])
            rows_all += 1
            if pos == kk:
                at_n += 1
                at += r < -tol
            if abs(r) <= tol:
                continue
            ok = r > 0 if pos < kk else r < 0
            decided += 1
            agree += ok
            if pos < kk:
                dp, ap = dp + 1, ap + ok
            else:
                ds, as_ = ds + 1, as_ + ok

    def f(a, b):
        return a / b if b else 0.0

    return {
        "sign_agree": f(agree, decided),
        "sign_agree_prefix": f(ap, dp),
        "sign_agree_suffix": f(as_, ds),
        "sign_agree_balanced": 0.5 * (f(ap, dp) + f(as_, ds)),
        "sign_agree_at_mistake": f(at, at_n),
        "sign_decided_frac": f(decided, rows_all),
        "located_rows": float(located),
    }


@pytest.mark.parametrize("tol", [0.0, 0.3])
def test_mistake_sign_agreement_matches_loop_reference(tol):
    rng = np.random.default_rng(7)
    b, t = 9, 8
    h = rng.normal(size=(b, t)).astype(np.float32)
    s = rng.normal(size=(b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.8
    mask[0] = False  # located but empty: left out
    k = rng.integers(-1, t + 2, b).astype(np.int32)  # −1, in range and past the end
    k[0] = 2
    h[~mask] = np.nan
    got = opsa.mistake_sign_agreement(h, s, k, mask, tol=tol)
    want = _agreement_reference(np.nan_to_num(h), s, k, mask, tol)
    for name, value in want.items():
        assert float(got[name]) == pytest.approx(value, abs=1e-6), name


def test_mistake_sign_agreement_hand_computed():
    # One row, tokens 0..3, mistake at token 2: r = (+1, −1, −2, +3).
    s = np.zeros((1, 4), np.float32)
    h = np.array([[1.0, -1.0, -2.0, 3.0]], np.float32)
    out = opsa.mistake_sign_agreement(h, s, np.array([2]), np.ones((1, 4), bool))
    assert float(out["sign_agree_prefix"]) == pytest.approx(0.5)  # +1 agrees, −1 not
    assert float(out["sign_agree_suffix"]) == pytest.approx(0.5)  # −2 agrees, +3 not
    assert float(out["sign_agree_at_mistake"]) == 1.0
    # A teacher with a constant sign scores 0.5 balanced whatever the split.
    for const in (1.0, -1.0):
        out = opsa.mistake_sign_agreement(
            np.full((1, 4), const, np.float32), s, np.array([1]), np.ones((1, 4), bool)
        )
        assert float(out["sign_agree_balanced"]) == pytest.approx(0.5)
    # An informative teacher (+ before the mistake, − from it on) agrees everywhere.
    h = np.array([[0.5, 0.2, -0.1, -0.4]], np.float32)
    out = opsa.mistake_sign_agreement(h, s, np.array([2]), np.ones((1, 4), bool))
    assert float(out["sign_agree"]) == 1.0 and float(out["sign_agree_balanced"]) == 1.0
