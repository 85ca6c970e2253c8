import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import gapo


# ------------------------------------------------------------ NumPy references (loops)
def _ref_bounds(adv_B, valid_B, e_lo, e_hi, e_min, e_max, ref=0.0):
    nz = [abs(a) for a, v in zip(adv_B, valid_B, strict=True) if v and a != 0]
    scale = ref if ref > 0 else (np.mean(nz) if nz else 0.0)
    lo, hi = [], []
    for a, v in zip(adv_B, valid_B, strict=True):
        r = abs(a) / max(scale, 1e-8) if v else 0.0
        lo.append(min(min(max(e_lo * r, e_min), e_max), 0.999))
        hi.append(min(max(e_hi * r, e_min), e_max))
    return np.array(lo), np.array(hi)


def _ref_ppo(lp, old, adv, m, lo, hi):
    b, t = lp.shape
    out = np.zeros((b, t))
    for i in range(b):
        for j in range(t):
            if m[i, j]:
                rho = np.exp(np.clip(lp[i, j] - old[i, j], -20, 20))
                a = adv[i, j]
                out[i, j] = -min(rho * a, np.clip(rho, 1 - lo[i], 1 + hi[i]) * a)
    return out


def _ref_gspo(lp, old, adv_B, m, lo, hi):
    out = np.zeros(lp.shape[0])
    for i in range(lp.shape[0]):
        n = m[i].sum()
        if n == 0:
            continue
        s = np.exp(np.sum(np.where(m[i], lp[i] - old[i], 0)) / n)
        out[i] = -min(s * adv_B[i], np.clip(s, 1 - lo[i], 1 + hi[i]) * adv_B[i])
    return out


def _inputs(seed, b, t, scale=0.3):
    rng = np.random.default_rng(seed)
    old = rng.normal(-2, 0.5, (b, t)).astype(np.float32)
    lp = (old + rng.normal(0, scale, (b, t))).astype(np.float32)
    m = rng.random((b, t)) < 0.7
    m[0] = False  # fully masked row
    m[1] = False
    m[1, 0] = True  # length-1 response
    adv_B = rng.normal(size=b).astype(np.float32)
    adv_B[2] = 0.0  # zero-variance group row
    adv = np.where(m, adv_B[:, None], 0).astype(np.float32)
    return lp, old, adv, adv_B, m


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("b,t,ref", [(6, 5, 0.0), (9, 3, 0.0), (5, 8, 1.3)])
def test_ppo_matches_reference(b, t, ref):
    lp, old, adv, adv_B, m = _inputs(b * t, b, t)
    loss, stats = gapo.gapo_ppo_objective(lp, old, adv, m, ref_scale=ref)
    lo, hi = _ref_bounds(adv_B, m.any(1), 0.2, 0.2, 0.1, 0.5, ref)
    np.testing.assert_allclose(loss, _ref_ppo(lp, old, adv, m, lo, hi), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(stats["eps_low_BxT"], np.where(m, lo[:, None], 0), rtol=1e-6)
    np.testing.assert_allclose(stats["eps_high_BxT"], np.where(m, hi[:, None], 0), rtol=1e-6)
    rho = np.exp(lp - old)
    want_hi = m & (adv > 0) & (rho > 1 + hi[:, None])
    np.testing.assert_array_equal(np.asarray(stats["clip_high_BxT"]) == 1, want_hi)


@pytest.mark.parametrize("b,t", [(6, 5), (4, 9)])
def test_gspo_matches_reference(b, t):
    lp, old, _, adv_B, m = _inputs(b + t, b, t, scale=1e-3)
    adv_B[0] = 5.0  # an empty row does not count in Ā
    loss, stats = gapo.gapo_gspo_objective(lp, old, adv_B, m)
    lo, hi = _ref_bounds(adv_B, m.any(1), 3e-4, 4e-4, 1.5e-4, 1e-3)
    np.testing.assert_allclose(loss, _ref_gspo(lp, old, adv_B, m, lo, hi), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stats["eps_high_B"], np.where(m.any(1), hi, 0), rtol=1e-6)
    assert loss[0] == 0


def test_hand_computed_bounds_and_loss():
    # A = (2, 1, 0, -1) → Ā = mean(2, 1, 1) = 4/3; ε = .2·|A|/Ā = (.3, .15, 0 → ε_min .1, .15).
    adv_B = np.float32([2.0, 1.0, 0.0, -1.0])
    lo, hi = gapo.adaptive_clip_bounds(
        adv_B, np.ones(4, bool), eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5
    )
    np.testing.assert_allclose(hi, [0.3, 0.15, 0.1, 0.15], rtol=1e-6)
    # ρ = 1.25 on a row with A = 2: fixed PPO (.2) would clip at 1.2; GAPO allows 1.3 → loss −2.5.
    lp = np.log(np.float32([[1.25]] * 4))
    old = np.zeros((4, 1), np.float32)
    loss, stats = gapo.gapo_ppo_objective(lp, old, adv_B[:, None], np.ones((4, 1), bool))
    np.testing.assert_allclose(loss[:, 0], [-2.5, -1.15, 0.0, 1.25], rtol=1e-6)
    np.testing.assert_array_equal(stats["clip_high_BxT"][:, 0], [0, 1, 0, 0])


def test_all_zero_advantages_and_empty_batch_are_finite():
    m = np.ones((3, 4), bool)
    lp = np.zeros((3, 4), np.float32)
    loss, stats = gapo.gapo_ppo_objective(lp + 0.5, lp, np.zeros((3, 4), np.float32), m)
    assert np.all(np.asarray(loss) == 0) and np.all(np.isfinite(stats["eps_low_BxT"]))
    loss, _ = gapo.gapo_ppo_objective(lp, lp, lp, np.zeros((3, 4), bool))
    assert np.all(np.asarray(loss) == 0)


def test_clip_rate_by_success_buckets():
    clipped = np.float32([1, 0, 1, 1, 0, 0, 0, 1])
    correct = np.array([1, 0, 0, 0, 1, 1, 1, 1], bool)
    groups = np.int32([0, 0, 0, 0, 1, 1, 1, 1])  # success rates .25 and 1.0
    rate, count = gapo.clip_rate_by_success(clipped, correct, groups, 2, num_bins=4)
    np.testing.assert_allclose(rate, [0, 0.75, 0, 0.25])
    np.testing.assert_allclose(count, [0, 4, 0, 4])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 0.4), st.floats(0.0, 3.0))
def test_bounds_are_monotone_in_advantage_and_respect_limits(seed, e0, ref):
    rng = np.random.default_rng(seed)
    adv_B = rng.normal(size=12).astype(np.float32) * rng.uniform(0.1, 5)
    lo, hi = gapo.adaptive_clip_bounds(
        adv_B,
        np.ones(12, bool),
        eps_low=e0,
        eps_high=e0,
        eps_min=0.05,
        eps_max=0.6,
        ref_scale=ref,
    )
    lo, hi = np.asarray(lo), np.asarray(hi)
    assert np.all((hi >= 0.05 - 1e-7) & (hi <= 0.6 + 1e-7)) and np.all(lo < 1)
    order = np.argsort(np.abs(adv_B))
    assert np.all(np.diff(hi[order]) >= -1e-7)  # more signal, more headroom
    # Surrogate at ρ = 1 is −A regardless of the bounds (the objective is unchanged there).
    m = np.ones((12, 2), bool)
    z = np.zeros((12, 2), np.float32)
    loss, _ = gapo.gapo_ppo_objective(z, z, np.repeat(adv_B[:, None], 2, 1), m, ref_scale=ref)
    np.testing.assert_allclose(loss, -np.repeat(adv_B[:, None], 2, 1), rtol=1e-6)
