"""Advantage kernels against plain NumPy loops, hand-computed cases, edge cases and properties."""

from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core.advantages import (
    broadcast_to_tokens,
    dr_grpo_advantages,
    gae,
    group_stats,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    whiten,
)

TOL = dict(rtol=1e-6, atol=1e-6)
PROPS = settings(max_examples=25, deadline=None)
# Compiling is what costs time on a loaded CPU (eager op-by-op dispatch is worse), so every
# group kernel runs through one jitted function, and most cases share the (B, G) = (12, 4)
# layout: the hand cases are padded to it with invalid rows, which must change nothing.
B, G = 12, 4
TRACES = collections.Counter()  # traces of the jitted test entry points


def group_all(r, g, valid, eps=1e-6, *, num_groups):
    """Every group kernel on one batch; ε always passed, so a default ε does not retrace."""
    return _group_all(r, g, valid, eps, num_groups=num_groups)


@functools.partial(jax.jit, static_argnames="num_groups")
def _group_all(r, g, valid, eps, *, num_groups):
    TRACES["group_all"] += 1
    kw = dict(num_groups=num_groups, valid_B=valid)
    return {
        "stats": group_stats(r, g, **kw),
        "grpo": grpo_advantages(r, g, eps=eps, **kw),
        "grpo_no_std": grpo_advantages(r, g, scale_by_std=False, eps=eps, **kw),
        "dr_grpo": dr_grpo_advantages(r, g, **kw),
        "rloo": rloo_advantages(r, g, **kw),
        "rpp": reinforce_pp_advantages(r, g, eps=eps, **kw),
        "rpp_none": reinforce_pp_advantages(r, g, baseline="none", eps=eps, **kw),
        "rpp_no_whiten": reinforce_pp_advantages(r, g, whiten=False, **kw),
        "rpp_plain": reinforce_pp_advantages(r, g, baseline="none", whiten=False, **kw),
    }


@jax.jit
def whiten_both(x, m):
    return whiten(x, m), whiten(x, m, shift_mean=False)


@jax.jit
def j_gae(*args, **kwargs):
    TRACES["gae"] += 1
    return gae(*args, **kwargs)


def pad(r, g, valid=None, junk=100.0):
    """Pads a hand case to B rows: extra rows are invalid, with junk rewards in group 1."""
    n = len(r)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid)
    r = np.concatenate([np.asarray(r, np.float32), np.full(B - n, junk, np.float32)])
    g = np.concatenate([np.asarray(g, np.int32), np.ones(B - n, np.int32)])
    return r, g, np.concatenate([valid, np.zeros(B - n, bool)])


# ----------------------------------------------------------------------------- references
# Plain loops in float64 (inputs cast first: float32 · Python float stays float32 in NumPy 2),
# written from the definitions, without the kernel's helpers.


def ref_group_stats(v, g, valid):
    v = np.asarray(v, np.float64)
    mean, std, count = np.zeros(len(v)), np.zeros(len(v)), np.zeros(len(v), np.int64)
    for b in range(len(v)):
        members = [float(v[j]) for j in range(len(v)) if g[j] == g[b] and valid[j]]
        n = len(members)
        count[b] = n
        if n:
            mean[b] = sum(members) / n
        if n > 1:
            std[b] = np.sqrt(sum((x - mean[b]) ** 2 for x in members) / (n - 1))
    return mean, std, count


def ref_grpo(r, g, valid, scale_by_std=True, eps=1e-6):
    r = np.asarray(r, np.float64)
    mean, std, _ = ref_group_stats(r, g, valid)
    out = np.zeros(len(r))
    for b in range(len(r)):
        if valid[b]:
            out[b] = (r[b] - mean[b]) / (std[b] + eps) if scale_by_std else r[b] - mean[b]
    return out


def ref_rloo(r, g, valid):
    r = np.asarray(r, np.float64)
    out = np.zeros(len(r))
    for i in range(len(r)):
        others = [float(r[j]) for j in range(len(r)) if j != i and g[j] == g[i] and valid[j]]
        if valid[i] and others:
            out[i] = r[i] - sum(others) / len(others)
    return out


def ref_whiten(x, m, shift_mean=True, eps=1e-8):
    x = np.asarray(x, np.float64)
    vals = [float(a) for a, keep in zip(x.ravel(), m.ravel(), strict=True) if keep]
    out = np.zeros(x.size)
    if not vals:
        return out.reshape(x.shape)
    mu = sum(vals) / len(vals)
    sigma = np.sqrt(sum((a - mu) ** 2 for a in vals) / len(vals))
    for k, (a, keep) in enumerate(zip(x.ravel(), m.ravel(), strict=True)):
        if keep:
            out[k] = (a - mu) / (sigma + eps) + (0.0 if shift_mean else mu)
    return out.reshape(x.shape)


def ref_reinforce_pp(r, g, valid, baseline="group", do_whiten=True, eps=1e-6):
    r = np.asarray(r, np.float64)
    a = ref_grpo(r, g, valid, scale_by_std=False) if baseline == "group" else r * valid
    return ref_whiten(a, valid, eps=eps) if do_whiten else a


def ref_gae(r, v, m, gamma, lam, bootstrap=None):
    r, v = np.asarray(r, np.float64), np.asarray(v, np.float64)
    adv, ret = np.zeros(r.shape), np.zeros(r.shape)
    for b in range(r.shape[0]):
        next_v = 0.0 if bootstrap is None else float(bootstrap[b])
        next_a = 0.0
        for t in reversed(range(r.shape[1])):
            if not m[b, t]:
                continue
            delta = r[b, t] + gamma * next_v - v[b, t]
            adv[b, t] = delta + gamma * lam * next_a
            ret[b, t] = adv[b, t] + v[b, t]
            next_v, next_a = v[b, t], adv[b, t]
    return adv, ret


def random_batch(seed, batch, num_groups, binary=False, p_valid=0.8):
    rng = np.random.default_rng(seed)
    if binary:
        r = rng.integers(0, 2, batch).astype(np.float32)
    else:
        r = rng.normal(size=batch).astype(np.float32)
    g = rng.integers(0, num_groups, batch).astype(np.int32)  # unequal sizes, any order
    valid = rng.random(batch) < p_valid
    return r, g, valid


def check_group_kernels(out, r, g, valid):
    """Every output of `group_all` against the NumPy references."""
    for got, want in zip(out["stats"], ref_group_stats(r, g, valid), strict=True):
        np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_allclose(out["grpo"], ref_grpo(r, g, valid), **TOL)
    np.testing.assert_allclose(out["grpo_no_std"], ref_grpo(r, g, valid, False), **TOL)
    np.testing.assert_allclose(out["dr_grpo"], ref_grpo(r, g, valid, False), **TOL)
    np.testing.assert_allclose(out["rloo"], ref_rloo(r, g, valid), **TOL)
    for name, baseline, do_whiten in [
        ("rpp", "group", True),
        ("rpp_none", "none", True),
        ("rpp_no_whiten", "group", False),
        ("rpp_plain", "none", False),
    ]:
        want = ref_reinforce_pp(r, g, valid, baseline, do_whiten)
        np.testing.assert_allclose(out[name], want, **TOL)


# ----------------------------------------------------------------------------- group kernels


@pytest.mark.parametrize("batch,num_groups", [(1, 1), (B, G), (40, 12)])
def test_group_kernels_match_numpy(batch, num_groups):
    for seed in range(3):
        for binary in (False, True):
            r, g, valid = random_batch(seed, batch, num_groups, binary)
            out = group_all(r, g, valid, num_groups=num_groups)
            check_group_kernels(out, r, g, valid)
            assert all(x.dtype == jnp.float32 for k, x in out.items() if k != "stats")
            mean, std, count = out["stats"]
            assert mean.dtype == std.dtype == jnp.float32 and count.dtype == jnp.int32


def test_group_stats_hand_case():
    # Group 0 = {1, 0, 2}: mean 1, Bessel var (0 + 1 + 1)/2 = 1; groups 2, 3 have size 1.
    mean, std, count = group_all(*pad([1.0, 0.0, 4.0, 2.0, 7.0], [0, 0, 2, 0, 3]), num_groups=G)[
        "stats"
    ]
    np.testing.assert_allclose(mean[:5], [1.0, 1.0, 4.0, 1.0, 7.0], **TOL)
    np.testing.assert_allclose(std[:5], [1.0, 1.0, 0.0, 1.0, 0.0], **TOL)
    np.testing.assert_array_equal(count[:5], [3, 3, 1, 3, 1])
    # The padded rows (group 1, rewards 100) are in no statistic: group 1 is empty.
    np.testing.assert_array_equal(count[5:], 0)
    np.testing.assert_array_equal(mean[5:], 0)


def test_grpo_hand_case():
    r = [1.0, 0, 0, 1, 1, 1, 1, 1, 0]
    g = [0, 0, 0, 0, 1, 1, 1, 1, 2]
    # Group 0: mean 1/2, Bessel var (4 · 1/4)/3 = 1/3, std = 0.5773502692;
    # A = ±0.5/(0.5773502692 + 1e-6) = ±0.8660239038. Group 1: zero variance; group 2: size 1.
    a = 0.8660239037870368
    expected = np.array([a, -a, -a, a, 0, 0, 0, 0, 0])
    # No mask (valid_B=None), natural shape.
    f = jax.jit(grpo_advantages, static_argnames="num_groups")
    np.testing.assert_allclose(f(jnp.array(r), jnp.array(g), 3), expected, **TOL)
    # Padded with invalid rows, shuffled across the batch, group ids relabelled.
    perm = np.array([8, 2, 5, 0, 7, 3, 1, 6, 4])
    relabel = np.array([2, 0, 3])
    out = group_all(*pad(np.array(r)[perm], relabel[np.array(g)[perm]]), num_groups=G)
    np.testing.assert_allclose(out["grpo"][:9], expected[perm], **TOL)
    assert np.all(np.asarray(out["grpo"])[:9][perm >= 4] == 0.0)
    assert np.all(np.asarray(out["grpo"])[9:] == 0.0)
    # Dr.GRPO: r − mean = ±0.5.
    np.testing.assert_allclose(out["dr_grpo"][:9], np.array([0.5, -0.5, -0.5, 0.5] + [0] * 5)[perm])


def test_rloo_hand_case():
    # 1 − (0+0+1)/3 = 2/3; 0 − (1+0+1)/3 = −2/3; 3 − 1 = 2; 1 − 3 = −2; size 1 → 0.
    # The padding rows (reward 100, in group 1) must not enter the leave-one-out means.
    out = group_all(*pad([1.0, 0, 0, 1, 3, 1, 5], [0, 0, 0, 0, 1, 1, 2]), num_groups=G)["rloo"]
    expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0, 0.0] + [0.0] * 5
    np.testing.assert_allclose(out, expected, **TOL)


def test_reinforce_pp_hand_case():
    out = group_all(*pad([1.0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 3, 3]), num_groups=G)
    # Group baseline → [.5, −.5, −.5, .5, 0, 0]; batch mean 0, population std sqrt(1/6).
    a = 1.2247418713989375  # 0.5 / (0.4082482905 + 1e-6)
    np.testing.assert_allclose(out["rpp"][:6], [a, -a, -a, a, 0, 0], **TOL)
    # No baseline: mean 2/3, population std sqrt(2/9) = 0.4714045208.
    b, c = 0.7071052811897295, 1.414210562379459  # (1/3)/(σ + ε), (2/3)/(σ + ε)
    np.testing.assert_allclose(out["rpp_none"][:6], [b, -c, -c, b, b, b], **TOL)
    np.testing.assert_allclose(out["rpp_no_whiten"][:6], [0.5, -0.5, -0.5, 0.5, 0, 0])
    np.testing.assert_allclose(out["rpp_plain"][:6], [1.0, 0, 0, 1, 1, 1])
    for name in ("rpp", "rpp_none", "rpp_no_whiten", "rpp_plain"):
        assert np.all(np.asarray(out[name])[6:] == 0.0)
    with pytest.raises(ValueError, match="'group', 'none'"):
        reinforce_pp_advantages(jnp.zeros(2), jnp.zeros(2, jnp.int32), 1, baseline="batch")


@pytest.mark.parametrize("reward", [0.0, 1.0, 0.1, -3.7])
def test_zero_variance_and_size_one_groups_are_exactly_zero(reward):
    # Groups of 3 and 7 identical rewards (0.1 · 3 / 3 is not 0.1 in float32), and a
    # singleton; ε = 0 too. Every group kernel gives exactly 0, never NaN.
    g = [0, 1, 0, 3, 3, 3, 0, 3, 3, 3, 2, 3]
    r = np.full(B, reward, np.float32)
    for eps in (1e-6, 0.0):
        out = group_all(r, np.array(g, np.int32), np.ones(B, bool), eps, num_groups=G)
        for name, x in out.items():
            if name != "stats" and name != "rpp_plain":
                assert np.all(np.asarray(x) == 0.0), name
        _, std, count = out["stats"]
        assert np.all(np.asarray(std) == 0.0)
        np.testing.assert_array_equal(count, [3, 1, 3, 7, 7, 7, 3, 7, 7, 7, 1, 7])


def test_close_rewards_stay_accurate():
    # Rewards 1e-3 apart around 100 (e.g. a reward model's scores): float32 r − mean must be
    # accurate relative to the spread, not to |r|, or A is off in the 3rd digit.
    r, g, valid = pad([100.0, 100.001, 100.0005, -7.0, -7.001, 3.0], [0, 0, 0, 2, 2, 3])
    out = group_all(r, g, valid, num_groups=G)
    check_group_kernels(out, r, g, valid)
    centered, kept = whiten_both(r, valid)
    np.testing.assert_allclose(centered, ref_whiten(r, valid), **TOL)
    np.testing.assert_allclose(kept, ref_whiten(r, valid, shift_mean=False), **TOL)


def test_all_masked_rows_and_empty_groups():
    r, g, _ = random_batch(5, B, 2)  # groups 2 and 3 empty
    out = group_all(r, g, np.zeros(B, bool), num_groups=G)
    for name, x in out.items():
        for arr in x if name == "stats" else [x]:
            assert np.all(np.asarray(arr) == 0), name
    # One valid row left: a group of size 1, advantage 0.
    one = np.arange(B) == 3
    out = group_all(r, g, one, num_groups=G)
    for name in ("grpo", "dr_grpo", "rloo", "rpp", "rpp_no_whiten"):
        assert np.all(np.asarray(out[name]) == 0), name


def test_rewards_of_any_dtype_give_float32():
    g = jax.ShapeDtypeStruct((4,), jnp.int32)
    for dtype in (jnp.bool_, jnp.int32, jnp.bfloat16):
        r = jax.ShapeDtypeStruct((4,), dtype)
        for fn in (grpo_advantages, dr_grpo_advantages, rloo_advantages, reinforce_pp_advantages):
            assert jax.eval_shape(functools.partial(fn, num_groups=2), r, g).dtype == jnp.float32
        stats = jax.eval_shape(functools.partial(group_stats, num_groups=2), r, g)
        assert [x.dtype for x in stats] == [jnp.float32, jnp.float32, jnp.int32]


def test_traced_hyperparameters_do_not_recompile():
    """ε, γ, λ and the masks are data under jit: new values reuse the compiled program."""
    r, g, valid = random_batch(3, B, G)
    rt, vt, mt = random_rollouts(3, 3, 8)
    boot = np.zeros(3, np.float32)
    group_all(r, g, valid, num_groups=G)
    j_gae(rt, vt, mt, gamma=1.0, lam=1.0, bootstrap_B=boot)
    traces = dict(TRACES)
    for eps, gamma, lam in [(1e-3, 0.9, 0.95), (0.5, 0.95, 0.0)]:
        valid, mt = ~valid, ~mt
        out = group_all(r, g, valid, eps, num_groups=G)
        np.testing.assert_allclose(out["grpo"], ref_grpo(r, g, valid, eps=eps), **TOL)
        adv, _ = j_gae(rt, vt, mt, gamma=gamma, lam=lam, bootstrap_B=boot)
        np.testing.assert_allclose(adv, ref_gae(rt, vt, mt, gamma, lam)[0], **TOL)
    assert TRACES == traces


# ----------------------------------------------------------------------------- properties

_cases = st.tuples(
    st.integers(0, 2**32 - 1),  # seed
    st.sampled_from([0.5, 0.8, 1.0]),  # fraction of valid rows
    st.booleans(),  # binary rewards, else half-integers in [-2, 2]
)


def _case(seed, p_valid, binary):
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 2, B) if binary else rng.integers(-4, 5, B) / 2  # ties and constants
    g = rng.integers(0, G, B).astype(np.int32)
    return rng, r.astype(np.float32), g, rng.random(B) < p_valid


@PROPS
@given(_cases)
def test_property_permuting_rows_and_relabelling_groups(case):
    """Advantages follow their rows: permuting rows (with their group ids and masks) and
    renaming the groups permutes every kernel's output the same way."""
    rng, r, g, valid = _case(*case)
    perm, relabel = rng.permutation(B), rng.permutation(G).astype(np.int32)
    before = group_all(r, g, valid, num_groups=G)
    after = group_all(r[perm], relabel[g[perm]], valid[perm], num_groups=G)
    for name in before:
        for x, y in zip(jax.tree.leaves(after[name]), jax.tree.leaves(before[name]), strict=True):
            np.testing.assert_allclose(x, np.asarray(y)[perm], **TOL)


@PROPS
@given(_cases)
def test_property_group_baselines(case):
    """GRPO, Dr.GRPO and RLOO advantages sum to 0 over each group's valid rows; Dr.GRPO and
    RLOO are invariant to adding a constant to every reward; RLOO's leave-one-out baseline
    equals G/(G−1)·(r − mean_g) for groups of size G ≥ 2."""
    _, r, g, valid = _case(*case)
    out = group_all(r, g, valid, num_groups=G)
    for name in ("grpo", "dr_grpo", "rloo"):
        sums = np.zeros(G)
        np.add.at(sums, g, np.asarray(out[name], np.float64))
        np.testing.assert_allclose(sums, 0.0, atol=1e-5)
    shifted = group_all(r + np.float32(3.0), g, valid, num_groups=G)
    np.testing.assert_allclose(shifted["dr_grpo"], out["dr_grpo"], **TOL)
    np.testing.assert_allclose(shifted["rloo"], out["rloo"], **TOL)
    mean, _, count = ref_group_stats(r, g, valid)
    scaled = np.where(valid & (count > 1), count / np.maximum(count - 1, 1) * (r - mean), 0.0)
    np.testing.assert_allclose(out["rloo"], scaled, **TOL)
    np.testing.assert_allclose(out["rloo"], ref_rloo(r, g, valid), **TOL)


@PROPS
@given(_cases)
def test_property_reinforce_pp_is_whitened(case):
    """With whitening, valid advantages have mean 0 and population std 1 (or are all 0);
    invalid rows are 0."""
    _, r, g, valid = _case(*case)
    out = group_all(r, g, valid, num_groups=G)
    for name, baselined in [("rpp", ref_grpo(r, g, valid, False)), ("rpp_none", r * valid)]:
        x = np.asarray(out[name])
        a = x[valid].astype(np.float64)
        assert np.all(x[~valid] == 0)
        if a.size and np.ptp(baselined[valid]) > 0:
            assert abs(a.mean()) < 1e-5 and abs(a.std() - 1) < 1e-4
        else:
            assert np.all(a == 0)  # constant after the baseline: exactly 0


# ----------------------------------------------------------------------------- whiten, broadcast


@pytest.mark.parametrize("shape", [(1,), (9,), (4, 7)])
def test_whiten_matches_numpy(shape):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x = rng.normal(2.0, 3.0, shape).astype(np.float32)
        m = rng.random(shape) < 0.7
        centered, kept = whiten_both(x, m)
        np.testing.assert_allclose(centered, ref_whiten(x, m), **TOL)
        np.testing.assert_allclose(kept, ref_whiten(x, m, shift_mean=False), **TOL)


def test_whiten_hand_and_edge_cases():
    x = np.array([1.0, 2.0, 3.0, 100.0, -50.0, 0, 0, 0, 0], np.float32)
    m = np.arange(9) < 3
    s = 1.2247448564  # 1/(σ + 1e-8): mean 2, population σ = sqrt(2/3) = 0.8164965809
    centered, kept = whiten_both(x, m)
    np.testing.assert_allclose(centered, [-s, 0, s] + [0] * 6, **TOL)
    np.testing.assert_allclose(kept, [2 - s, 2, 2 + s] + [0] * 6, **TOL)
    centered, kept = whiten_both(x, np.zeros(9, bool))  # all masked
    assert np.all(np.asarray(centered) == 0) and np.all(np.asarray(kept) == 0)
    c = np.full(9, 0.1, np.float32)  # constant: exactly 0, and the mean kept exactly
    centered, kept = whiten_both(c, np.ones(9, bool))
    assert np.all(np.asarray(centered) == 0)
    np.testing.assert_array_equal(kept, c)


def test_broadcast_to_tokens():
    mask = jnp.array([[0, 1, 1], [1, 0, 0], [0, 0, 0]])
    out = jax.jit(broadcast_to_tokens)(jnp.array([1.5, -2.0, 7.0]), mask)
    np.testing.assert_array_equal(out, [[0, 1.5, 1.5], [-2, 0, 0], [0, 0, 0]])
    assert out.dtype == jnp.float32


# ----------------------------------------------------------------------------- GAE


def random_rollouts(seed, batch, length):
    """Left-padded prompt, response with env-token gaps, right padding; junk where masked."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(batch, length)).astype(np.float32)
    v = rng.normal(size=(batch, length)).astype(np.float32)
    m = np.zeros((batch, length), bool)
    for b in range(batch):
        start = rng.integers(0, length)
        end = rng.integers(start, length + 1)
        m[b, start:end] = rng.random(end - start) < 0.75
    return r, v, m


@pytest.mark.parametrize("batch,length", [(1, 1), (3, 8), (6, 17)])
def test_gae_matches_python_loop(batch, length):
    for seed in range(2):
        r, v, m = random_rollouts(seed * 1000 + batch * 100 + length, batch, length)
        boot = np.linspace(-1, 1, batch).astype(np.float32)
        for gamma in (1.0, 0.9, 0.95):
            for lam in (1.0, 0.9, 0.95):
                adv, ret = j_gae(r, v, m, gamma=gamma, lam=lam, bootstrap_B=boot * seed)
                ref_adv, ref_ret = ref_gae(r, v, m, gamma, lam, boot * seed)
                assert adv.dtype == ret.dtype == jnp.float32
                np.testing.assert_allclose(adv, ref_adv, **TOL)
                np.testing.assert_allclose(ret, ref_ret, **TOL)


def test_gae_hand_case_with_padding_and_gap():
    # γ = 0.9, λ = 0.8, r = [0, 0, 1], V = [.5, .6, .7]:
    # t=2: δ = 1 − .7 = .3, A = .3; t=1: δ = .9·.7 − .6 = .03, A = .03 + .72·.3 = .246;
    # t=0: δ = .9·.6 − .5 = .04, A = .04 + .72·.246 = .21712. Returns A + V.
    # Row 0: the three tokens then right padding; row 1: the same tokens at positions 1, 3, 4
    # (left pad, an env-token gap, right pad), junk 9 on masked positions.
    r = np.array([[0.0, 0, 1, 9, 9, 9], [9, 0, 9, 0, 1, 9]])
    v = np.array([[0.5, 0.6, 0.7, 9, 9, 9], [9, 0.5, 9, 0.6, 0.7, 9]])
    m = np.array([[1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0]], bool)
    adv, ret = j_gae(r, v, m, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv[0], [0.21712, 0.246, 0.3, 0, 0, 0], **TOL)
    np.testing.assert_allclose(adv[1], [0, 0.21712, 0, 0.246, 0.3, 0], **TOL)
    np.testing.assert_allclose(ret[0], [0.71712, 0.846, 1.0, 0, 0, 0], **TOL)
    np.testing.assert_allclose(ret[1], [0, 0.71712, 0, 0.846, 1.0, 0], **TOL)
    # Bootstrap V = 2 after the last token: A_2 = 1 + 1.8 − .7 = 2.1, A_1 = .03 + .72·2.1 = 1.542,
    # A_0 = .04 + .72·1.542 = 1.15024.
    adv, _ = j_gae(r, v, m, gamma=0.9, lam=0.8, bootstrap_B=jnp.array([2.0, 2.0]))
    np.testing.assert_allclose(adv[0], [1.15024, 1.542, 2.1, 0, 0, 0], **TOL)
    np.testing.assert_allclose(adv[1], [0, 1.15024, 0, 1.542, 2.1, 0], **TOL)


def test_gae_edge_cases():
    # Length-1 response: A = r − V + γ·bootstrap = 1 − .25 + .9·.5.
    adv, ret = j_gae(
        np.ones((1, 1)), np.full((1, 1), 0.25), np.ones((1, 1), bool), gamma=0.9, lam=0.95,
        bootstrap_B=np.array([0.5]),
    )  # fmt: skip
    np.testing.assert_allclose(adv, [[1.2]], **TOL)
    np.testing.assert_allclose(ret, [[1.45]], **TOL)
    # An all-masked row: zeros, finite, even with a bootstrap value. Row 1: tokens 1, 2.
    m = np.zeros((3, 8), bool)
    m[1, 1:3] = True
    adv, ret = j_gae(
        np.ones((3, 8)), np.ones((3, 8)), m, gamma=1.0, lam=1.0, bootstrap_B=np.array([5.0, 0, 0])
    )
    assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret))
    np.testing.assert_array_equal(adv[0], 0)
    np.testing.assert_array_equal(ret[0], 0)
    np.testing.assert_allclose(adv[1, :3], [0, 1, 0])  # t=2: 1 − 1 = 0; t=1: 1 + 1 − 1 = 1


@PROPS
@given(st.integers(0, 2**32 - 1), st.sampled_from([(1.0, 1.0), (0.9, 0.95), (0.95, 0.9)]))
def test_property_gae_skips_gaps(seed, gamma_lam):
    """A rollout with env-token gaps (and left/right padding) gives, on its valid tokens, the
    same advantages and returns as the same rollout with the gaps removed."""
    gamma, lam = gamma_lam
    rng = np.random.default_rng(seed)
    n, length = int(rng.integers(1, 9)), 16
    r = rng.normal(size=(2, length)).astype(np.float32)  # junk on masked positions
    v = rng.normal(size=(2, length)).astype(np.float32)
    pos = np.sort(rng.choice(length, n, replace=False))  # row 1: valid tokens with gaps
    r[1, pos], v[1, pos] = r[0, :n], v[0, :n]  # row 0: the same tokens, contiguous
    m = np.zeros((2, length), bool)
    m[0, :n] = m[1, pos] = True
    boot = np.full(2, rng.normal(), np.float32)
    adv, ret = j_gae(r, v, m, gamma=gamma, lam=lam, bootstrap_B=boot)
    adv, ret = np.asarray(adv), np.asarray(ret)
    np.testing.assert_allclose(adv[1, pos], adv[0, :n], **TOL)
    np.testing.assert_allclose(ret[1, pos], ret[0, :n], **TOL)
    assert np.all(adv[~m] == 0) and np.all(ret[~m] == 0)


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_property_gae_limits(seed):
    """λ = 1: A_t = Σ_{k≥t} γ^{k−t} r_k − V_t (Monte Carlo); λ = 0: A_t = δ_t (one-step TD)."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(3, 8)).astype(np.float32)
    v = rng.normal(size=(3, 8)).astype(np.float32)
    m, gamma, boot = np.ones((3, 8), bool), 0.9, np.zeros(3, np.float32)
    mc = np.array([[r[b, t:] @ gamma ** np.arange(8 - t) for t in range(8)] for b in range(3)])
    adv, ret = j_gae(r, v, m, gamma=gamma, lam=1.0, bootstrap_B=boot)
    np.testing.assert_allclose(adv, mc - v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, mc, rtol=1e-5, atol=1e-5)
    next_v = np.concatenate([v[:, 1:], np.zeros((3, 1))], axis=1)
    adv, _ = j_gae(r, v, m, gamma=gamma, lam=0.0, bootstrap_B=boot)
    np.testing.assert_allclose(adv, r + gamma * next_v - v, **TOL)
