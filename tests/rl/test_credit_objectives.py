import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.core import losses
from rlvr_jax.rl import credit, objectives


def _grpo_reference(rewards, groups, eps=1e-6):
    out = np.zeros_like(rewards)
    for g in np.unique(groups):
        r = rewards[groups == g]
        std = r.std(ddof=1) if r.size > 1 else 0.0
        out[groups == g] = 0.0 if std == 0 else (r - r.mean()) / (std + eps)
    return out


def test_estimators_broadcast_sequence_advantages_to_response_tokens():
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, 12).astype(np.float32)
    groups = np.repeat(np.arange(3), 4).astype(np.int32)
    valid = np.ones(12, bool)
    mask = rng.random((12, 7)) < 0.6
    entry = credit.ESTIMATORS.get("grpo")
    adv, ret = entry.fn(
        rewards, groups, valid, mask, num_groups=3, values_BxT=None, **entry.defaults
    )
    assert ret is None
    want = _grpo_reference(rewards, groups)[:, None] * mask
    np.testing.assert_allclose(np.asarray(adv), want, rtol=1e-5, atol=1e-6)
    adv, _ = credit.ESTIMATORS.get("rloo").fn(
        rewards, groups, valid, mask, num_groups=3, values_BxT=None
    )
    loo = np.array(
        [rewards[i] - np.mean(np.delete(rewards[groups == groups[i]], i % 4)) for i in range(12)]
    )
    np.testing.assert_allclose(np.asarray(adv), loo[:, None] * mask, atol=1e-6)


def test_gae_puts_the_reward_on_each_rows_last_response_token():
    # gamma = lam = 1 and zero values: every response token's advantage is the reward.
    mask = np.array([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]], bool)
    rewards = np.array([1.0, -2.0, 5.0], np.float32)
    adv, ret = credit.gae(
        rewards,
        None,
        np.ones(3, bool),
        mask,
        num_groups=0,
        values_BxT=np.zeros((3, 5), np.float32),
        gamma=1.0,
        lam=1.0,
        whiten=False,
    )
    np.testing.assert_allclose(np.asarray(adv), rewards[:, None] * mask)
    np.testing.assert_allclose(np.asarray(ret), rewards[:, None] * mask)
    # Values 0.5 everywhere, gamma = 1, lam = 0: A_t = r_t + V_{t+1} - V_t.
    adv, _ = credit.gae(
        rewards[:1],
        None,
        np.ones(1, bool),
        mask[:1],
        num_groups=0,
        values_BxT=np.full((1, 5), 0.5, np.float32),
        gamma=1.0,
        lam=0.0,
        whiten=False,
    )
    np.testing.assert_allclose(np.asarray(adv)[0], [0, 0, 0, 0.5, 0], atol=1e-7)


def test_gspo_spread_over_tokens_equals_the_sequence_objective():
    rng = np.random.default_rng(1)
    lp = jnp.asarray(rng.normal(-1, 0.3, (5, 6)), jnp.float32)
    old = lp + jnp.asarray(rng.normal(0, 0.01, (5, 6)), jnp.float32)
    mask = jnp.asarray(rng.random((5, 6)) < 0.7).at[:, 0].set(True)
    adv_B = jnp.asarray(rng.normal(size=5), jnp.float32)
    adv = adv_B[:, None] * mask
    spec = objectives.LossSpec(name="gspo", hparams=(("eps_high", 4e-4), ("eps_low", 3e-4)))

    def ours(lp):
        denom = objectives.denominator(spec, mask)
        return objectives.policy_loss(
            spec, lp, {"mask_BxT": mask, "old_logps_BxT": old, "adv_BxT": adv}, denom
        )[0]

    def paper(lp):
        loss_B, _ = losses.gspo_objective(lp, old, adv_B, mask)
        return loss_B.mean()

    np.testing.assert_allclose(ours(lp), paper(lp), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(ours)(lp), jax.grad(paper)(lp), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "constant"])
def test_policy_loss_micro_batches_sum_to_the_full_gradient(aggregation):
    rng = np.random.default_rng(2)
    b, t = 8, 5
    lp = jnp.asarray(rng.normal(-1, 0.3, (b, t)), jnp.float32)
    mb = {
        "mask_BxT": jnp.asarray(rng.random((b, t)) < 0.7),
        "old_logps_BxT": lp + jnp.asarray(rng.normal(0, 0.2, (b, t)), jnp.float32),
        "adv_BxT": jnp.asarray(rng.normal(size=(b, t)), jnp.float32),
        "ref_logps_BxT": lp + jnp.asarray(rng.normal(0, 0.2, (b, t)), jnp.float32),
    }
    spec = objectives.LossSpec(
        name="ppo_clip",
        hparams=(("dual_clip", 3.0), ("eps_high", 0.28), ("eps_low", 0.2)),
        aggregation=aggregation,
        kl_coef=0.1,
        entropy_coef=0.01,
    )
    ent = jnp.asarray(rng.random((b, t)), jnp.float32)
    denom = objectives.denominator(spec, mb["mask_BxT"], constant=t)

    def full(lp):
        return objectives.policy_loss(spec, lp, mb, denom, ent)[0]

    def chunked(lp):
        total = 0.0
        for lo in range(0, b, 2):
            part = {k: v[lo : lo + 2] for k, v in mb.items()}
            total += objectives.policy_loss(spec, lp[lo : lo + 2], part, denom, ent[lo : lo + 2])[0]
        return total

    np.testing.assert_allclose(full(lp), chunked(lp), rtol=1e-5)
    np.testing.assert_allclose(jax.grad(full)(lp), jax.grad(chunked)(lp), rtol=1e-5, atol=1e-7)
    # Hand check of the pieces: with ref = old = lp and adv = 1, ratio 1, KL 0.
    ones = dict(mb, old_logps_BxT=lp, ref_logps_BxT=lp, adv_BxT=jnp.ones((b, t)))
    loss, sums = objectives.policy_loss(spec, lp, ones, denom, ent)
    m = np.asarray(mb["mask_BxT"], np.float32)
    total = -(m.sum()) - 0.01 * float((np.asarray(ent) * m).sum())
    if aggregation == "seq-mean-token-mean":
        per_seq = (-m - 0.01 * np.asarray(ent) * m).sum(1) / np.maximum(m.sum(1), 1)
        want = per_seq.sum() / (m.sum(1) > 0).sum()
    else:
        want = total / float(denom)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(sums["kl"], 0.0, atol=1e-6)
    np.testing.assert_allclose(sums["ratio"], m.sum(), rtol=1e-6)


def test_loss_spec_is_hashable_and_tis_weights_apply():
    spec = objectives.LossSpec(
        name="ppo_clip",
        hparams=(("dual_clip", 0.0), ("eps_high", 0.2), ("eps_low", 0.2)),
        tis_cap=2.0,
    )
    assert hash(spec) == hash(objectives.LossSpec(**spec.__dict__))
    lp = jnp.zeros((1, 3))
    mb = {
        "mask_BxT": jnp.ones((1, 3), bool),
        "old_logps_BxT": lp,
        "adv_BxT": jnp.ones((1, 3)),
        "behaviour_logps_BxT": jnp.log(jnp.array([[0.5, 1.0, 4.0]])),
    }
    # TIS weight min(π_old / π_rollout, 2) = [2, 1, 0.25]; loss = -Σ w / 1 sequence / 3 tokens.
    loss, _ = objectives.policy_loss(spec, lp, mb, 1.0)
    np.testing.assert_allclose(loss, -(2 + 1 + 0.25) / 3, rtol=1e-6)
