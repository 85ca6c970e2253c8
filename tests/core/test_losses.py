"""Loss kernels against plain NumPy loop references, hand values, edge cases and properties."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlvr_jax.core import losses

TOL = dict(rtol=1e-6, atol=1e-6)
SHAPES = [(1, 1), (3, 5), (8, 17)]
MODES = losses.AGGREGATION_MODES


def _jit(fn, static=()):
    """fn under jax.jit; literal nested lists become float32 arrays (not pytrees of scalars)."""
    jitted = jax.jit(fn, static_argnames=static)

    def call(*args, **kw):
        return jitted(
            *[np.asarray(a, np.float32) if isinstance(a, list) else a for a in args], **kw
        )

    return call


class K:
    """The kernels as the trainer calls them: under jax.jit (also one compile per shape,
    far cheaper on CPU than op-by-op dispatch)."""

    log_ratio = _jit(losses.log_ratio)
    ratio = _jit(losses.ratio)
    ppo_clip_objective = _jit(losses.ppo_clip_objective, "dual_clip")
    gspo_sequence_ratio = _jit(losses.gspo_sequence_ratio)
    gspo_objective = _jit(losses.gspo_objective)
    gspo_token_objective = _jit(losses.gspo_token_objective)
    truncated_importance_weights = _jit(losses.truncated_importance_weights)
    kl_penalty = _jit(losses.kl_penalty, "kind")
    kl_in_reward = _jit(losses.kl_in_reward, "kind")
    entropy_bonus = _jit(losses.entropy_bonus)
    clipped_value_loss = _jit(losses.clipped_value_loss)


# ----------------------------------------------------------------------------- inputs


def _mask(rng, B, T):
    """Random mask with an all-masked row and a one-token row whenever B allows."""
    mask = rng.random((B, T)) < 0.6
    if B >= 2:
        mask[0] = False
    if B >= 3:
        mask[1] = False
        mask[1, rng.integers(T)] = True
    return mask


def _inputs(seed, B, T, spread=0.5):
    rng = np.random.default_rng(seed)
    logps = -rng.exponential(1.0, (B, T)).astype(np.float32)
    old = (logps + spread * rng.standard_normal((B, T))).astype(np.float32)
    adv = rng.standard_normal((B, T)).astype(np.float32)
    return rng, logps, old, adv, _mask(rng, B, T)


def _np(x):
    return np.asarray(x, dtype=np.float64)


# ----------------------------------------------------------------------------- NumPy references


def ref_log_ratio(lp, old, mask, clamp=20.0):
    out = np.zeros(lp.shape)
    for i in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if mask[i, t]:
                out[i, t] = min(max(float(lp[i, t]) - float(old[i, t]), -clamp), clamp)
    return out


def ref_aggregate(v, mask, mode, constant=None):
    """Rows without a masked-in token count in no denominator (verl's convention)."""
    total, denom = 0.0, 0.0
    for i in range(v.shape[0]):
        row = [float(v[i, t]) for t in range(v.shape[1]) if mask[i, t]]
        if not row:
            continue
        if mode == "seq-mean-token-mean":
            total += sum(row) / len(row)
            denom += 1
        else:
            total += sum(row)
            denom += {"token-mean": len(row), "seq-mean-token-sum": 1, "constant": constant}[mode]
    return total, denom


def ref_clip_obj(rho, a, eps_low, eps_high):
    return min(rho * a, min(max(rho, 1 - eps_low), 1 + eps_high) * a)


def ref_ppo(lp, old, adv, mask, eps_low, eps_high, dual):
    lr = ref_log_ratio(lp, old, mask)
    loss, low, high, dc = (np.zeros(lp.shape) for _ in range(4))
    for i in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if not mask[i, t]:
                continue
            rho, a = math.exp(lr[i, t]), float(adv[i, t])
            obj = ref_clip_obj(rho, a, eps_low, eps_high)
            low[i, t] = a < 0 and rho < 1 - eps_low
            high[i, t] = a > 0 and rho > 1 + eps_high
            if dual is not None and a < 0 and dual * a > obj:
                obj, dc[i, t] = dual * a, 1.0
            loss[i, t] = -obj
    return loss, low, high, dc


def ref_gspo_ratio(lp, old, mask):
    lr = ref_log_ratio(lp, old, mask)
    s = np.ones(lp.shape[0])
    for i in range(lp.shape[0]):
        n = int(mask[i].sum())
        if n:
            s[i] = math.exp(sum(lr[i, t] for t in range(lp.shape[1]) if mask[i, t]) / n)
    return s


def ref_gspo(lp, old, adv_B, mask, eps_low, eps_high):
    s = ref_gspo_ratio(lp, old, mask)
    loss = np.zeros(lp.shape[0])
    for i in range(lp.shape[0]):
        if mask[i].any():
            loss[i] = -ref_clip_obj(s[i], float(adv_B[i]), eps_low, eps_high)
    return loss


def ref_gspo_token(lp, old, adv, mask, eps_low, eps_high):
    s = ref_gspo_ratio(lp, old, mask)
    loss = np.zeros(lp.shape)
    for i in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if mask[i, t]:
                loss[i, t] = -ref_clip_obj(s[i], float(adv[i, t]), eps_low, eps_high)
    return loss


def ref_tis(tr, ro, mask, cap):
    w = np.zeros(tr.shape)
    for i, t in np.ndindex(*tr.shape):
        if mask[i, t]:
            w[i, t] = min(math.exp(float(tr[i, t]) - float(ro[i, t])), cap)
    return w


def ref_kl(lp, ref, mask, kind):
    out = np.zeros(lp.shape)
    for i, t in np.ndindex(*lp.shape):
        if mask[i, t]:
            d = float(lp[i, t]) - float(ref[i, t])
            out[i, t] = {"k1": d, "k2": 0.5 * d * d, "k3": math.exp(-d) + d - 1}[kind]
    return out


def ref_value_loss(v, v_old, ret, mask, c):
    out = np.zeros(v.shape)
    for i, t in np.ndindex(*v.shape):
        if mask[i, t]:
            vv, vo, r = float(v[i, t]), float(v_old[i, t]), float(ret[i, t])
            vc = vo + min(max(vv - vo, -c), c)
            out[i, t] = 0.5 * max((vv - r) ** 2, (vc - r) ** 2)
    return out


# ----------------------------------------------------------------------------- reference tests

HP = dict(
    clamp=20.0,
    eps_low=0.2,
    eps_high=0.28,
    gspo_eps_low=3e-4,
    gspo_eps_high=4e-4,
    tok_eps_low=0.1,
    tok_eps_high=0.2,
    cap=2.0,
    beta=0.05,
    coef=0.01,
    clip=0.2,
    constant=7.0,
)


@jax.jit
def _all_kernels(x, hp):
    """Every kernel on one input set. One compile per shape (hyperparameters are traced)."""
    lp, old, adv, mask = x["lp"], x["old"], x["adv"], x["mask"]
    ppo = dict(eps_low=hp["eps_low"], eps_high=hp["eps_high"])
    out = {
        "log_ratio": losses.log_ratio(lp, old, mask, clamp=hp["clamp"]),
        "ratio": losses.ratio(lp, old, mask, clamp=hp["clamp"]),
        "ppo": losses.ppo_clip_objective(lp, old, adv, mask, **ppo),
        "ppo_dual": losses.ppo_clip_objective(lp, old, adv, mask, dual_clip=3.0, **ppo),
        "gspo_ratio": losses.gspo_sequence_ratio(lp, old, mask),
        "gspo": losses.gspo_objective(
            lp, old, adv[:, 0], mask, eps_low=hp["gspo_eps_low"], eps_high=hp["gspo_eps_high"]
        ),
        "gspo_token": losses.gspo_token_objective(
            lp, old, adv, mask, eps_low=hp["tok_eps_low"], eps_high=hp["tok_eps_high"]
        ),
        "tis": losses.truncated_importance_weights(lp, old, mask, cap=hp["cap"]),
        "entropy": losses.entropy_bonus(x["entropy"], mask, hp["coef"]),
        "value": losses.clipped_value_loss(adv, x["v_old"], x["ret"], mask, clip=hp["clip"]),
    }
    for mode in MODES:
        out[mode] = losses.aggregate(adv, mask, mode, constant=hp["constant"])
        out[mode + "/normalised"] = losses.aggregate_with_denominator(
            adv, mask, mode, hp["constant"]
        )
    for kind in losses.KL_KINDS:
        out[kind] = losses.kl_penalty(lp, old, mask, kind)
        out[kind + "/reward"] = losses.kl_in_reward(
            x["rewards"], lp, old, mask, beta=hp["beta"], kind=kind
        )
    return out


def _case(seed, shape, spread=0.5, **hp):
    rng, lp, old, adv, mask = _inputs(seed, *shape, spread=spread)
    x = dict(
        lp=lp,
        old=old,
        adv=adv,
        mask=mask,
        entropy=rng.exponential(1.0, shape).astype(np.float32),
        v_old=(adv + 0.3 * rng.standard_normal(shape)).astype(np.float32),
        ret=rng.standard_normal(shape).astype(np.float32),
        rewards=rng.standard_normal(shape[0]).astype(np.float32),
    )
    hp = {**HP, **hp}
    return x, hp, _all_kernels(x, hp)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_ratio_matches_reference(shape, seed):
    x, _, out = _case(seed, shape, spread=3.0, clamp=2.0)
    expected = ref_log_ratio(x["lp"], x["old"], x["mask"], clamp=2.0)
    np.testing.assert_allclose(out["log_ratio"], expected, **TOL)
    np.testing.assert_allclose(out["ratio"], np.exp(expected), **TOL)


@pytest.mark.parametrize("shape", SHAPES)
def test_aggregate_matches_reference(shape):
    x, _, out = _case(2, shape)
    for mode in MODES:
        total, denom = out[mode]
        exp_total, exp_denom = ref_aggregate(x["adv"], x["mask"], mode, 7.0)
        np.testing.assert_allclose([total, denom], [exp_total, exp_denom], **TOL, err_msg=mode)
        np.testing.assert_allclose(out[mode + "/normalised"], exp_total / 7.0, **TOL)
        assert total.dtype == denom.dtype == jnp.float32


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)])
def test_ppo_matches_reference(shape, eps):
    x, _, out = _case(3, shape, spread=1.5, eps_low=eps[0], eps_high=eps[1])
    for key, dual in (("ppo", None), ("ppo_dual", 3.0)):
        loss, stats = out[key]
        exp_loss, low, high, dc = ref_ppo(x["lp"], x["old"], x["adv"], x["mask"], *eps, dual)
        np.testing.assert_allclose(loss, exp_loss, **TOL)
        np.testing.assert_array_equal(stats["clip_low_BxT"], low)
        np.testing.assert_array_equal(stats["clip_high_BxT"], high)
        np.testing.assert_array_equal(stats["dual_clip_BxT"], dc)
        assert loss.dtype == jnp.float32


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("spread", [1e-4, 0.3])
def test_gspo_matches_reference(shape, spread):
    x, _, out = _case(4, shape, spread=spread)
    lp, old, adv, mask = x["lp"], x["old"], x["adv"], x["mask"]
    s_ref = ref_gspo_ratio(lp, old, mask)
    np.testing.assert_allclose(out["gspo_ratio"], s_ref, **TOL)
    loss_B, stats = out["gspo"]
    np.testing.assert_allclose(loss_B, ref_gspo(lp, old, adv[:, 0], mask, 3e-4, 4e-4), **TOL)
    valid, a = mask.any(-1), adv[:, 0]
    np.testing.assert_array_equal(stats["clip_high_B"], valid & (a > 0) & (s_ref > 1 + 4e-4))
    np.testing.assert_array_equal(stats["clip_low_B"], valid & (a < 0) & (s_ref < 1 - 3e-4))
    tok, _ = out["gspo_token"]
    np.testing.assert_allclose(tok, ref_gspo_token(lp, old, adv, mask, 0.1, 0.2), **TOL)


@pytest.mark.parametrize("shape", SHAPES)
def test_kl_matches_reference(shape):
    x, _, out = _case(5, shape, spread=1.0, beta=0.05)
    for kind in losses.KL_KINDS:
        kl = ref_kl(x["lp"], x["old"], x["mask"], kind)
        np.testing.assert_allclose(out[kind], kl, **TOL, err_msg=kind)
        expected = x["rewards"] - 0.05 * kl.sum(-1)
        np.testing.assert_allclose(out[kind + "/reward"], expected, **TOL, err_msg=kind)


@pytest.mark.parametrize("shape", SHAPES)
def test_tis_entropy_value_match_reference(shape):
    x, _, out = _case(6, shape, spread=1.0, cap=1.5, clip=0.1)
    lp, old, mask = x["lp"], x["old"], x["mask"]
    np.testing.assert_allclose(out["tis"], ref_tis(lp, old, mask, 1.5), **TOL)
    np.testing.assert_allclose(out["entropy"], np.where(mask, -0.01 * _np(x["entropy"]), 0), **TOL)
    expected = ref_value_loss(x["adv"], x["v_old"], x["ret"], mask, 0.1)
    np.testing.assert_allclose(out["value"], expected, **TOL)


# ----------------------------------------------------------------------------- hand values


def test_ratio_hand_values():
    lp, old, mask = [[-1.0, -2.0, -0.5, 0.0]], [[-1.5, -2.0, -3.0, -30.0]], [[1, 1, 0, 1]]
    np.testing.assert_allclose(K.log_ratio(lp, old, mask), [[0.5, 0.0, 0.0, 20.0]], **TOL)
    np.testing.assert_allclose(K.ratio(lp, old, mask), [[1.6487213, 1.0, 1.0, 4.8516520e8]], **TOL)


@jax.jit
def _aggregate_modes(values_BxT, mask_BxT, denoms):
    return {
        m: (
            losses.aggregate(values_BxT, mask_BxT, m, constant=4.5),
            losses.aggregate_with_denominator(values_BxT, mask_BxT, m, denoms[m]),
        )
        for m in MODES
    }


def test_aggregate_hand_values():
    v = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
    m = [[1, 1, 0], [0, 0, 0], [1, 1, 1]]  # the empty middle row counts in no denominator
    expected = {
        "token-mean": (27.0, 5.0),
        "seq-mean-token-mean": (9.5, 2.0),
        "seq-mean-token-sum": (27.0, 2.0),
        "constant": (27.0, 9.0),  # 4.5 per non-empty row
    }
    got = _aggregate_modes(np.array(v), np.array(m), {k: w[1] for k, w in expected.items()})
    for mode, want in expected.items():
        np.testing.assert_allclose(got[mode][0], want, **TOL, err_msg=mode)
        np.testing.assert_allclose(got[mode][1], want[0] / want[1], **TOL, err_msg=mode)


def test_ppo_hand_cases():
    # (ρ, A): clip-high, A<0 above bound, A>0 below bound, clip-low, dual, no dual, inside.
    rho = np.array([[1.5, 1.5, 0.5, 0.5, 4.0, 2.0, 1.1]], np.float32)
    adv = np.array([[1.0, -1.0, 1.0, -1.0, -2.0, -2.0, 2.0]], np.float32)
    lp, old, mask = np.log(rho), np.zeros_like(rho), np.ones_like(rho)
    kw = dict(eps_low=0.2, eps_high=0.28)
    loss, stats = K.ppo_clip_objective(lp, old, adv, mask, dual_clip=3.0, **kw)
    np.testing.assert_allclose(loss, [[-1.28, 1.5, -0.5, 0.8, 6.0, 4.0, -2.2]], **TOL)
    np.testing.assert_array_equal(stats["clip_high_BxT"], [[1, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(stats["clip_low_BxT"], [[0, 0, 0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(stats["dual_clip_BxT"], [[0, 0, 0, 0, 1, 0, 0]])
    no_dual, _ = K.ppo_clip_objective(lp, old, adv, mask, **kw)
    np.testing.assert_allclose(no_dual[0, 4], 8.0, **TOL)
    # Gradient d loss / d log π_θ: −ρA where unclipped, 0 where a clip binds.
    grad = jax.jit(
        jax.grad(lambda x: K.ppo_clip_objective(x, old, adv, mask, dual_clip=3.0, **kw)[0].sum())
    )(lp)
    np.testing.assert_allclose(grad, [[0.0, 1.5, -0.5, 0.0, 0.0, 4.0, -2.2]], **TOL)
    with pytest.raises(ValueError, match="> 1"):
        K.ppo_clip_objective(lp, old, adv, mask, dual_clip=0.5)


def test_gspo_hand_values():
    lp = [[-1.0, -2.0, -7.0], [-1.0, -1.0, -1.0]]
    old = [[-1.2, -2.4, 0.0], [0.0, 0.0, 0.0]]
    mask = [[1, 1, 0], [0, 0, 0]]
    s = K.gspo_sequence_ratio(lp, old, mask)
    np.testing.assert_allclose(s, [1.3498588, 1.0], **TOL)  # exp((0.2 + 0.4) / 2)
    loss, stats = K.gspo_objective(lp, old, [1.0, 5.0], mask)
    np.testing.assert_allclose(loss, [-1.0004, 0.0], **TOL)
    np.testing.assert_array_equal(stats["clip_high_B"], [1.0, 0.0])
    loss, _ = K.gspo_objective(lp, old, [-1.0, 5.0], mask)
    np.testing.assert_allclose(loss, [1.3498588, 0.0], **TOL)
    tok, _ = K.gspo_token_objective(lp, old, [[1.0, 1.0, 9.0], [1.0, 1.0, 1.0]], mask)
    np.testing.assert_allclose(tok, [[-1.0004, -1.0004, 0.0], [0.0, 0.0, 0.0]], **TOL)


def test_tis_kl_entropy_value_hand_values():
    w = K.truncated_importance_weights(
        [[-1.0, -1.0, -3.0, 0.0]], [[-1.5, -2.0, -1.0, 9.0]], [[1, 1, 1, 0]]
    )
    np.testing.assert_allclose(w, [[1.6487213, 2.0, 0.13533528, 0.0]], **TOL)
    lp, ref, m = [[-1.0, -2.0, 5.0]], [[-1.5, -1.0, 0.0]], [[1, 1, 0]]  # d = 0.5, −1
    np.testing.assert_allclose(K.kl_penalty(lp, ref, m, "k1"), [[0.5, -1.0, 0.0]], **TOL)
    np.testing.assert_allclose(K.kl_penalty(lp, ref, m, "k2"), [[0.125, 0.5, 0.0]], **TOL)
    np.testing.assert_allclose(
        K.kl_penalty(lp, ref, m, "k3"), [[0.10653066, 0.71828183, 0.0]], **TOL
    )
    r = K.kl_in_reward(
        [1.0, 0.0],
        [[-1.0, -2.0], [-1.0, -1.0]],
        [[-1.5, -2.0], [-1.0, -1.0]],
        [[1, 1], [1, 0]],
        beta=0.1,
        kind="k1",
    )
    np.testing.assert_allclose(r, [0.95, 0.0], **TOL)
    np.testing.assert_allclose(K.entropy_bonus([[1.0, 2.0]], [[1, 0]], 0.01), [[-0.01, 0.0]])
    v = K.clipped_value_loss(
        [[1.0, 0.0, 0.6, 1.0, 0.9]],
        [[0.5, 0.5, 0.5, 0.0, 0.0]],
        [[0.0, 1.0, 1.0, 0.5, 1.0]],
        [[1, 1, 1, 1, 1]],
        clip=0.2,
    )
    np.testing.assert_allclose(v, [[0.5, 0.5, 0.08, 0.125, 0.32]], **TOL)


def test_unknown_names_list_choices():
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-mean.*constant"):
        losses.aggregate(np.zeros((1, 1)), np.ones((1, 1)), "mean")
    with pytest.raises(ValueError, match="constant"):
        losses.aggregate(np.zeros((1, 1)), np.ones((1, 1)), "constant")
    with pytest.raises(ValueError, match="k1.*k2.*k3"):
        losses.kl_penalty(np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), "k4")


# ----------------------------------------------------------------------------- edge cases


@jax.jit
def _everything_with_grad(lp, old, adv, mask):
    """Every policy kernel's loss summed, its gradient w.r.t. log π_θ, and a few outputs."""

    def total(x):
        ppo, _ = losses.ppo_clip_objective(x, old, adv, mask, dual_clip=3.0)
        gspo, _ = losses.gspo_objective(x, old, adv[:, 0], mask, eps_low=0.2, eps_high=0.2)
        tok, _ = losses.gspo_token_objective(x, old, adv, mask)
        kl = sum(losses.kl_penalty(x, old, mask, k) for k in losses.KL_KINDS)
        loss = ppo + tok + kl + losses.truncated_importance_weights(x, old, mask)
        tm = losses.aggregate_with_denominator(loss, mask, "token-mean", 9.0)
        return (
            tm
            + losses.aggregate_with_denominator(loss, mask, "seq-mean-token-mean", 2.0)
            + gspo.sum()
        )

    value, grad = jax.value_and_grad(total)(lp)
    return dict(
        value=value,
        grad=grad,
        ppo=losses.ppo_clip_objective(lp, old, adv, mask)[0],
        gspo=losses.gspo_objective(lp, old, adv[:, 0], mask)[0],
        s=losses.gspo_sequence_ratio(lp, old, mask),
        ratio=losses.ratio(lp, old, mask),
    )


def test_masked_padding_and_empty_rows_are_finite():
    """-inf / NaN padding, an all-masked row, a length-1 row and A = 0 (zero-variance group)."""
    lp = np.array([[-1.0, -np.inf, np.nan], [-np.inf, np.nan, -np.inf], [-0.3, 0, 0]], np.float32)
    old = np.array([[-0.5, -np.inf, 1.0], [np.nan, -np.inf, 0.0], [-0.2, np.nan, 0]], np.float32)
    mask = np.array([[1, 0, 0], [0, 0, 0], [1, 0, 0]], bool)
    adv = np.array([[1.0, np.nan, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    out = _everything_with_grad(lp, old, adv, mask)
    assert np.isfinite(out["value"]) and np.isfinite(out["grad"]).all()
    np.testing.assert_array_equal(np.asarray(out["grad"])[~mask], 0.0)
    np.testing.assert_array_equal(out["ppo"][1:], 0.0)  # empty row; A = 0 on the length-1 row
    np.testing.assert_array_equal(out["gspo"][1:], 0.0)
    assert out["s"][1] == 1.0
    np.testing.assert_array_equal(np.asarray(out["ratio"])[~mask], 1.0)
    # Nothing to train on: counts are 0 and every mode gives loss 0, not NaN.
    got = _aggregate_modes(lp[:2], np.zeros((2, 3), bool), {m: 0.0 for m in MODES})
    for mode in MODES:
        assert got[mode][1] == 0.0, mode
    for mode in MODES:  # empty rows count in no denominator
        assert got[mode][0][1] == 0.0, mode


def test_extreme_log_ratios_stay_finite():
    lp = np.array([[1e4, -1e4, 1e4], [-1e4, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    old = np.zeros_like(lp)
    adv = np.array([[1.0, -1.0, -1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]], bool)
    out = _everything_with_grad(lp, old, adv, mask)
    assert np.isfinite(out["value"]) and np.isfinite(out["grad"]).all()
    assert np.isfinite(out["ppo"]).all() and np.isfinite(out["gspo"]).all()
    np.testing.assert_allclose(out["ppo"][0, 2], math.exp(20.0), rtol=1e-6)  # ρ clamped at e^20


# ----------------------------------------------------------------------------- micro-batching


def _policy_logps(w_DxV, x_BxTxD, tokens_BxT):
    """A linear 'policy': log_softmax(x @ W) at the sampled tokens."""
    logp_BxTxV = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", x_BxTxD, w_DxV), -1)
    return jnp.take_along_axis(logp_BxTxV, tokens_BxT[..., None], -1)[..., 0]


def _policy_entropy(w_DxV, x_BxTxD):
    logp = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", x_BxTxD, w_DxV), -1)
    return -(jnp.exp(logp) * logp).sum(-1)


@pytest.fixture(scope="module")
def policy_batch():
    rng = np.random.default_rng(11)
    B, T, D, V = 6, 6, 5, 9
    w = rng.standard_normal((D, V)).astype(np.float32)
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    tokens = rng.integers(V, size=(B, T))
    logits = _np(x) @ _np(w)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    lp = np.take_along_axis(logp, tokens[..., None], -1)[..., 0]
    data = dict(
        x=x,
        tokens=tokens,
        old=(lp + 0.4 * rng.standard_normal((B, T))).astype(np.float32),
        ref=(lp + 0.2 * rng.standard_normal((B, T))).astype(np.float32),
        adv=rng.standard_normal((B, T)).astype(np.float32),
        mask=_mask(rng, B, T),
    )
    return w, data


OBJECTIVES = (*MODES, "gspo", "gspo-token")


def _objectives(w, d, denoms):
    """The token loss under each aggregation mode, then GSPO and GSPO-token (A_{i,t} = A_i)."""
    lp = _policy_logps(w, d["x"], d["tokens"])
    mask, old = d["mask"], d["old"]
    ppo, _ = losses.ppo_clip_objective(lp, old, d["adv"], mask, eps_high=0.28, dual_clip=3.0)
    kl = losses.kl_penalty(lp, d["ref"], mask, "k3")
    ent = losses.entropy_bonus(_policy_entropy(w, d["x"]), mask, 0.01)
    tis = losses.truncated_importance_weights(old, d["ref"], mask)
    loss_BxT = tis * ppo + 0.1 * kl + ent
    out = [losses.aggregate_with_denominator(loss_BxT, mask, m, denoms[m]) for m in MODES]
    adv_B = d["adv"][:, 0]
    clip = dict(eps_low=0.3, eps_high=0.4)
    gspo_B, _ = losses.gspo_objective(lp, old, adv_B, mask, **clip)
    adv_BxT = jnp.broadcast_to(adv_B[:, None], lp.shape)
    tok_BxT, _ = losses.gspo_token_objective(lp, old, adv_BxT, mask, **clip)
    n = denoms["seq-mean-token-mean"]  # sequences with ≥ 1 token
    tok = losses.aggregate_with_denominator(tok_BxT, mask, "seq-mean-token-mean", n)
    return jnp.stack(out + [gspo_B.sum() / n, tok])


@jax.jit
def _objective_grad(w, d, denoms, select_K):
    """Gradient of the objective picked by one-hot `select_K` (traced: one compile per shape)."""
    return jax.grad(lambda w: _objectives(w, d, denoms) @ select_K)(w)


@jax.jit
def _denoms(mask_BxT):
    """Per-mode denominators; they depend on masks only, so are known before any gradient."""
    zeros = jnp.zeros(mask_BxT.shape)
    return {m: losses.aggregate(zeros, mask_BxT, m, constant=mask_BxT.shape[1])[1] for m in MODES}


def test_micro_batching_gives_full_batch_gradient(policy_batch):
    """Σ over micro-batches of grads normalised by the GLOBAL denominator = full-batch grad."""
    w, data = policy_batch
    B, T = data["mask"].shape
    rows = np.split(np.random.default_rng(0).permutation(B), 3)  # 3 micro-batches, rows shuffled
    micro = [jax.tree.map(lambda a, ix=ix: a[ix], data) for ix in rows]
    full_denoms = _denoms(data["mask"])
    micro_denoms = [_denoms(d["mask"]) for d in micro]
    global_denoms = jax.tree.map(lambda *xs: sum(xs), *micro_denoms)
    for m in MODES:
        assert float(global_denoms[m]) == float(full_denoms[m]), m
    # Dr.GRPO's B × T_max, B = the rows with a loss token.
    assert float(global_denoms["constant"]) == T * int(data["mask"].any(-1).sum())
    grads = {}
    for k, name in enumerate(OBJECTIVES):
        select = np.eye(len(OBJECTIVES), dtype=np.float32)[k]
        full = _objective_grad(w, data, full_denoms, select)
        accumulated = sum(_objective_grad(w, d, global_denoms, select) for d in micro)
        assert np.abs(full).max() > 1e-3, name
        np.testing.assert_allclose(accumulated, full, **TOL, err_msg=name)
        grads[name] = full
        if name in ("token-mean", "seq-mean-token-mean"):  # local denominators would be wrong
            local = sum(
                _objective_grad(w, d, n, select) for d, n in zip(micro, micro_denoms, strict=True)
            )
            assert not np.allclose(local / len(micro), full, rtol=1e-3), name
    # GSPO-token with a per-sequence advantage has GSPO's gradient.
    np.testing.assert_allclose(grads["gspo-token"], grads["gspo"], **TOL)


@jax.jit
def _gspo_token_vs_sequence(lp, old, adv_B, mask, n):
    adv_BxT = jnp.broadcast_to(adv_B[:, None], lp.shape)

    def seq(x):
        return losses.gspo_objective(x, old, adv_B, mask)[0].sum() / n

    def tok(x):
        loss, _ = losses.gspo_token_objective(x, old, adv_BxT, mask)
        return losses.aggregate_with_denominator(loss, mask, "seq-mean-token-mean", n)

    return jax.value_and_grad(seq)(lp), jax.value_and_grad(tok)(lp)


def test_gspo_token_equals_sequence_with_constant_advantage():
    """Default (tiny) GSPO clip range; half the rows inside it so gradients are non-zero."""
    rng, lp, old, _, mask = _inputs(12, 6, 8, spread=0.3)
    old[::2] = lp[::2] + 1e-5 * rng.standard_normal(lp[::2].shape).astype(np.float32)
    adv_B = rng.standard_normal(6).astype(np.float32)
    n = float(mask.any(-1).sum())
    (v_seq, g_seq), (v_tok, g_tok) = _gspo_token_vs_sequence(lp, old, adv_B, mask, n)
    np.testing.assert_allclose(v_tok, v_seq, **TOL)
    np.testing.assert_allclose(g_tok, g_seq, **TOL)
    assert np.abs(g_seq).max() > 1e-3


# ----------------------------------------------------------------------------- properties
# Drawn at the reference tests' shapes through `_all_kernels`, so nothing recompiles.

_fast = settings(max_examples=30, deadline=None)


@st.composite
def _kernel_inputs(draw, lo=-5.0, hi=0.0):
    shape = draw(st.sampled_from(SHAPES[1:]))

    def arr(a, b):
        return draw(hnp.arrays(np.float32, shape, elements=st.floats(a, b, width=32)))

    x = dict(
        lp=arr(lo, hi),
        old=arr(lo, hi),
        adv=arr(-3, 3),
        mask=draw(hnp.arrays(bool, shape)),
        entropy=arr(0, 5),
        v_old=arr(-3, 3),
        ret=arr(-3, 3),
        rewards=arr(-1, 1)[:, 0],
    )
    return x


@_fast
@given(_kernel_inputs(lo=-1e4, hi=1e4))
def test_kl_nonnegative_ratio_bounded_weights_capped(x):
    out = _all_kernels(x, HP)
    mask = x["mask"]
    k3, k2 = np.asarray(out["k3"]), np.asarray(out["k2"])
    assert np.isfinite(k3).all() and (k3 >= 0).all() and (k2 >= 0).all()
    lr = np.asarray(out["log_ratio"])
    assert (np.abs(lr) <= 20.0).all() and (lr[~mask] == 0).all()
    assert (np.asarray(out["ratio"])[~mask] == 1).all()
    w = np.asarray(out["tis"])
    assert ((w >= 0) & (w <= 2.0)).all() and (w[~mask] == 0).all()
    for key in ("ppo", "ppo_dual", "gspo", "gspo_token"):
        assert np.isfinite(out[key][0]).all(), key


@_fast
@given(_kernel_inputs())
def test_ppo_is_pessimistic_and_dual_bounded(x):
    out = _all_kernels(x, HP)
    rho = np.asarray(out["ratio"], np.float64)
    a = np.where(x["mask"], x["adv"], 0.0)
    loss, stats = out["ppo"]
    loss = np.asarray(loss, np.float64)
    assert (loss >= -rho * a - 1e-5 * (1 + np.abs(rho * a))).all()  # min(ρA, clip·A) ≤ ρA
    inside = (rho >= 0.8) & (rho <= 1.28)
    np.testing.assert_allclose(loss[inside], (-rho * a)[inside], rtol=1e-5, atol=1e-5)
    assert not (np.asarray(stats["clip_low_BxT"]) * np.asarray(stats["clip_high_BxT"])).any()
    dual = np.asarray(out["ppo_dual"][0])
    neg = a < 0
    assert (dual[neg] <= -3.0 * a[neg] + 1e-5).all()
    np.testing.assert_array_equal(dual[~neg], loss[~neg])  # dual clip only touches A < 0


@_fast
@given(_kernel_inputs(), st.data())
def test_aggregate_ignores_masked_values(x, data):
    junk = data.draw(
        hnp.arrays(np.float32, x["adv"].shape, elements=st.floats(-1e6, 1e6, width=32))
    )
    a = _all_kernels(x, HP)
    b = _all_kernels({**x, "adv": np.where(x["mask"], x["adv"], junk)}, HP)
    for m in MODES:
        np.testing.assert_array_equal(a[m], b[m], err_msg=m)
    c = _all_kernels({**x, "adv": np.full(x["adv"].shape, 2.5, np.float32)}, HP)
    if x["mask"].any():
        np.testing.assert_allclose(c["token-mean"][0] / c["token-mean"][1], 2.5, rtol=1e-6)


@_fast
@given(_kernel_inputs(lo=-2.0, hi=2.0))
def test_value_loss_and_gspo_token_properties(x):
    # With A = 1 and s < 1 + ε_high (|log ρ| ≤ 4 here), GSPO-token's loss is −s_i on every token.
    x = {**x, "adv": np.ones_like(x["adv"])}
    out = _all_kernels(x, {**HP, "tok_eps_high": 100.0})
    mask = x["mask"]
    s = np.asarray(out["gspo_ratio"], np.float64)
    np.testing.assert_allclose(out["gspo_token"][0], np.where(mask, -s[:, None], 0.0), rtol=1e-6)
    vl = np.asarray(out["value"], np.float64)
    plain = 0.5 * np.square(_np(x["adv"]) - _np(x["ret"])) * mask
    assert (vl >= plain * (1 - 1e-6) - 1e-6).all()  # clipping never lowers the critic loss
