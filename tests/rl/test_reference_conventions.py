"""Conventions fixed by the reference implementations (verl, TRL, OpenRLHF), vs NumPy.

Each reference below is a loop over plain floats written from the reference's
documented rule, not from our kernels: loss aggregation without padding rows
(verl's `agg_loss`, Dr.GRPO's B × L_max with B the real rows), REINFORCE++-
baseline's whitening over tokens (verl's `masked_whiten`: token mean, Bessel
variance), and the k3 cap (verl's `low_var_kl`: clamp(exp(kl) − kl − 1, −10, 10)
with kl = log π_ref − log π_θ clamped to ±20).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.core import losses
from rlvr_jax.rl import credit, objectives

TOL = dict(rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- aggregation
def ref_agg(loss, mask, mode, l_max=None):
    """verl's agg_loss over the rows that have a loss token; Dr.GRPO: Σ / (rows × L_max)."""
    rows = [
        [float(loss[i, t]) for t in range(loss.shape[1]) if mask[i, t]]
        for i in range(loss.shape[0])
    ]
    rows = [r for r in rows if r]  # fully masked rows are excluded from every denominator
    if mode == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if mode == "seq-mean-token-sum":
        return sum(map(sum, rows)) / len(rows)
    return sum(map(sum, rows)) / (len(rows) * l_max)  # "constant" (Dr.GRPO)


def _ours(loss, mask, mode, l_max=7.0):
    total, denom = losses.aggregate(loss, mask, mode, constant=l_max)
    return float(total / denom)


@pytest.mark.parametrize("mode", losses.AGGREGATION_MODES)
def test_aggregation_matches_verl_and_ignores_padding_rows(mode):
    rng = np.random.default_rng(0)
    loss = rng.normal(size=(6, 7)).astype(np.float32)
    mask = rng.random((6, 7)) < 0.6
    mask[2] = False  # an empty row inside the batch
    mask[0, 0] = True
    np.testing.assert_allclose(_ours(loss, mask, mode), ref_agg(loss, mask, mode, 7.0), **TOL)
    # Padding rows (what a partly filled batch adds) change no mode's loss.
    padded_loss = np.concatenate([loss, rng.normal(size=(3, 7)).astype(np.float32)])
    padded_mask = np.concatenate([mask, np.zeros((3, 7), bool)])
    np.testing.assert_allclose(
        _ours(padded_loss, padded_mask, mode), _ours(loss, mask, mode), rtol=1e-6
    )


def test_aggregation_hand_values_with_an_empty_row():
    # Row sums 3 and 24 over 2 non-empty rows (the middle row is padding).
    v = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
    m = np.array([[1, 1, 0], [0, 0, 0], [1, 1, 1]], bool)
    assert _ours(v, m, "seq-mean-token-sum") == pytest.approx(27.0 / 2)  # was 27 / 3
    assert _ours(v, m, "constant", l_max=4.0) == pytest.approx(27.0 / (2 * 4))  # was 27 / (3 · 4)
    assert _ours(v, m, "seq-mean-token-mean") == pytest.approx((1.5 + 8.0) / 2)
    assert _ours(v, m, "token-mean") == pytest.approx(27.0 / 5)


# ----------------------------------------------------------------------------- REINFORCE++
def ref_reinforce_pp_baseline(rewards, groups, mask, eps=1e-8):
    """verl's REINFORCE++-baseline: r − mean of its prompt group, tiled over the response,
    then (x − mean) · rsqrt(var + eps) with the token mean and the unbiased token variance."""
    means = {
        g: np.mean([r for r, h in zip(rewards, groups, strict=True) if h == g]) for g in groups
    }
    scores = [float(r) - means[g] for r, g in zip(rewards, groups, strict=True)]
    vals = [scores[i] for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]
    mu = sum(vals) / len(vals)
    var = sum((x - mu) ** 2 for x in vals) / (len(vals) - 1)
    out = np.zeros(mask.shape)
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[i, t]:
                out[i, t] = (scores[i] - mu) / math.sqrt(var + eps)
    return out


def _rpp(rewards, groups, mask, valid=None, **hp):
    entry = credit.ESTIMATORS.get("reinforce_pp")
    valid = np.ones(len(rewards), bool) if valid is None else valid
    adv, ret = entry.fn(
        np.asarray(rewards, np.float32),
        np.asarray(groups, np.int32),
        valid,
        mask,
        num_groups=int(max(groups)) + 1,
        values_BxT=None,
        **{**entry.defaults, **hp},
    )
    assert ret is None
    return np.asarray(adv)


def test_reinforce_pp_whitens_over_tokens_like_verl():
    rng = np.random.default_rng(1)
    rewards = rng.integers(0, 2, 16).astype(np.float32)
    groups = np.repeat(np.arange(4), 4)
    mask = np.zeros((16, 9), bool)
    for i, n in enumerate(rng.integers(1, 10, 16)):
        mask[i, 9 - n :] = True  # lengths 1..9
    want = ref_reinforce_pp_baseline(rewards, groups, mask)
    np.testing.assert_allclose(_rpp(rewards, groups, mask), want, **TOL)
    # Padding rows (valid False) change nothing.
    pad_mask = np.concatenate([mask, np.ones((4, 9), bool)])
    got = _rpp(
        np.concatenate([rewards, np.full(4, 7.0, np.float32)]),
        np.concatenate([groups, [3, 3, 3, 3]]),
        pad_mask,
        valid=np.arange(20) < 16,
    )
    np.testing.assert_allclose(got[:16], want, **TOL)
    assert np.all(got[16:] == 0)


def test_reinforce_pp_tokens_vs_rows_hand_case():
    # Groups {1, 0} and {1, 1}; lengths 1, 3, 2, 2. Baselined: .5, −.5, 0, 0.
    # Tokens: [.5, −.5 ×3, 0 ×4], mean −.125, Bessel var .875 / 7 = .125 → σ = .35355:
    # rows get 1.76777, −1.06066, .35355, .35355 (the all-correct group is pushed up).
    # Rows (ours, population std over rows): 1.41421, −1.41421, 0, 0.
    mask = np.array([[0, 0, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]], bool)
    rewards, groups = [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]
    tok = _rpp(rewards, groups, mask)
    np.testing.assert_allclose(
        tok.sum(1) / mask.sum(1), [1.767767, -1.06066, 0.353553, 0.353553], rtol=1e-5
    )
    rows = _rpp(rewards, groups, mask, whiten_over="rows")
    np.testing.assert_allclose(rows.sum(1) / mask.sum(1), [1.414210, -1.414210, 0, 0], atol=1e-5)
    with pytest.raises(ValueError, match="whiten_over"):
        _rpp(rewards, groups, mask, whiten_over="sequences")


# ----------------------------------------------------------------------------- k3 cap
def ref_low_var_kl(logp, ref_logp):
    kl = min(max(ref_logp - logp, -20.0), 20.0)
    return min(max(math.exp(kl) - kl - 1.0, -10.0), 10.0)


def test_k3_cap_matches_verl_low_var_kl():
    d = np.array([-30.0, -15.0, -3.0, -2.39, -0.5, 0.0, 0.7, 4.0, 25.0], np.float32)
    lp = np.full((1, d.size), -1.0, np.float32)
    ref = lp - d[None]
    mask = np.ones_like(lp, bool)
    got = losses.kl_penalty(lp, ref, mask, "k3", k3_cap=10.0)
    want = [[ref_low_var_kl(float(a), float(b)) for a, b in zip(lp[0], ref[0], strict=True)]]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    uncapped = losses.kl_penalty(lp, ref, mask, "k3")
    assert float(uncapped[0, 1]) == pytest.approx(math.exp(15) - 16, rel=1e-5)


def test_loss_spec_caps_k3_by_default_and_zero_turns_it_off():
    lp = jnp.array([[-1.0, -1.0]])
    mb = {
        "mask_BxT": jnp.ones((1, 2), bool),
        "old_logps_BxT": lp,
        "adv_BxT": jnp.zeros((1, 2)),
        "ref_logps_BxT": lp + jnp.array([[15.0, 0.5]]),  # d = −15, −0.5
    }
    k3_small = math.exp(0.5) - 1.5
    for cap, first in ((objectives.LossSpec("ppo_clip").kl_clamp, 10.0), (0.0, math.exp(15) - 16)):
        spec = objectives.LossSpec(
            name="ppo_clip",
            hparams=(("dual_clip", 0.0), ("eps_high", 0.2), ("eps_low", 0.2)),
            kl_coef=0.1,
            kl_clamp=cap,
        )
        loss, sums = objectives.policy_loss(spec, lp, mb, 1.0)
        np.testing.assert_allclose(sums["kl"], first + k3_small, rtol=1e-5)
        np.testing.assert_allclose(loss, 0.1 * (first + k3_small) / 2, rtol=1e-5)
    # Where the cap binds the KL term has no gradient; below it, the usual one.
    spec = objectives.LossSpec(
        name="ppo_clip",
        hparams=(("dual_clip", 0.0), ("eps_high", 0.2), ("eps_low", 0.2)),
        kl_coef=1.0,
    )
    grad = jax.grad(lambda x: objectives.policy_loss(spec, x, mb, 1.0)[0])(lp)
    # d k3 / d log π_θ = 1 − exp(−d): 0 (capped) and 1 − e^{0.5}; the PPO term is 0 (A = 0).
    np.testing.assert_allclose(grad, [[0.0, (1 - math.exp(0.5)) / 2]], rtol=1e-5, atol=1e-7)
