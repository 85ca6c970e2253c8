import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the losses)
from rlvr_jax.core import cpo, h2sd, losses, opd, opsa, rlsd, rstg, saf_opd
from rlvr_jax.rl import config, credit, objectives

TRANSFORMS = [
    "opdvr",
    "opd_additive",
    "opd_rescale",
    "saf_opd",
    "rstg",
    "h2sd",
    "rlsd",
    "cpo",
    "entropy_shaping",
    "opsa",
    "opd_denoised",
]
# config.score.signals that provide the fields each transform / loss requires.
SIGNALS_FOR = {
    "opdvr": "teacher",
    "opd_additive": "teacher",
    "opd_rescale": "teacher",
    "saf_opd": "teacher",
    "rstg": "teacher",
    "opd_denoised": "teacher",
    "h2sd": "hint",
    "rlsd": "hint",
    "cpo": "hint",
    "h2sd_kl": "hint",
}


def _batch(rng, groups=3, g=4, t=6):
    b = groups * g
    mask = rng.random((b, t)) < 0.8
    mask[:, 0] = True
    correct = rng.random(b) < 0.5
    correct[:g] = False
    return {
        "mask_BxT": mask,
        "old_logps_BxT": rng.normal(-1, 1, (b, t)).astype(np.float32),
        "teacher_logps_BxT": rng.normal(-1, 1, (b, t)).astype(np.float32),
        "hint_logps_BxT": rng.normal(-1, 1, (b, t)).astype(np.float32),
        "entropy_BxT": rng.gamma(1.0, 1.0, (b, t)).astype(np.float32),
        "correct_B": correct,
        "rewards_B": correct.astype(np.float32),
        "group_B": np.repeat(np.arange(groups), g).astype(np.int32),
        "valid_B": np.ones(b, bool),
    }


@pytest.mark.parametrize("name", TRANSFORMS)
def test_transform_is_selectable_from_the_config(name):
    c = config.default_config()
    c.credit.transforms = name
    c.score.signals = SIGNALS_FOR.get(name, "")
    config.validate(c)
    assert set(c.credit[name].keys()) == set(credit.TRANSFORMS.get(name).defaults)


def test_h2sd_kl_loss_is_selectable():
    c = config.default_config()
    c.loss.name = "h2sd_kl"
    c.score.signals = SIGNALS_FOR["h2sd_kl"]
    config.validate(c)


def test_transforms_give_the_kernels_numbers():
    rng = np.random.default_rng(0)
    bt = _batch(rng)
    m, t, s, h = bt["mask_BxT"], bt["teacher_logps_BxT"], bt["old_logps_BxT"], bt["hint_logps_BxT"]
    adv = np.repeat(rng.normal(size=(12, 1)), 6, 1).astype(np.float32) * m
    c = config.default_config()
    hp = {n: c.credit[n].to_dict() for n in TRANSFORMS}
    seq = opd.sequence_advantage(adv, m)
    want = {
        "opdvr": opd.opdvr_advantages(t, s, bt["correct_B"], m),
        "opd_additive": opd.weighted_additive_advantages(adv, t, s, m),
        "opd_rescale": opd.teacher_modulated_advantages(adv, t, s, m),
        "saf_opd": saf_opd.saf_advantages(adv, t, s, m, 7),
        "rstg": rstg.rstg_advantages(
            adv,
            t,
            s,
            bt["entropy_BxT"],
            bt["correct_B"],
            bt["group_B"],
            bt["valid_B"],
            m,
            num_groups=3,
        ),
        "h2sd": h2sd.h2sd_advantages(adv, h, s, bt["correct_B"], m),
        "rlsd": adv * rlsd.rlsd_weights(h, s, adv, m),  # the reference rule (the default)
        "cpo": cpo.cpo_advantages(adv, h, s, bt["correct_B"], m),
        "entropy_shaping": cpo.entropy_shaped_advantages(adv, bt["entropy_BxT"], m),
        "opsa": opsa.opsa_advantages(adv, bt["entropy_BxT"], m),
        "opd_denoised": opsa.denoised_opd_advantages(t, s, bt["correct_B"], m),
    }
    for name in TRANSFORMS:
        got = credit.apply_transforms([name], adv, bt, hp, step=7)  # saf_opd's schedule step
        np.testing.assert_allclose(np.asarray(got), np.asarray(want[name]), atol=1e-6, err_msg=name)
    hp["opdvr"].update(grpd=True, u=0.2)
    got = credit.apply_transforms(["opdvr"], adv, bt, hp)
    gated = opd.opdvr_advantages(t, s, bt["correct_B"], m, seq_adv_B=seq, u=0.2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(gated), atol=1e-6)


@pytest.mark.parametrize(
    "name,field",
    [("opdvr", "teacher_logps_BxT"), ("saf_opd", "teacher_logps_BxT"), ("cpo", "hint_logps_BxT")],
)
def test_missing_signal_names_the_field(name, field):
    bt = _batch(np.random.default_rng(1))
    del bt[field]
    hp = {name: config.default_config().credit[name].to_dict()}
    with pytest.raises(ValueError, match=field):
        credit.apply_transforms([name], np.zeros((12, 6)), bt, hp)


def test_h2sd_kl_loss_adds_the_reverse_kl_on_failed_rows():
    rng = np.random.default_rng(2)
    bt = _batch(rng)
    lp = bt["old_logps_BxT"] + rng.normal(0, 0.05, bt["old_logps_BxT"].shape).astype(np.float32)
    adv = rng.normal(size=(12, 6)).astype(np.float32) * bt["mask_BxT"]
    mb = dict(bt, adv_BxT=adv)
    spec = objectives.LossSpec(
        name="h2sd_kl",
        hparams=(("eps_high", 0.2), ("eps_low", 0.2), ("kl_coef", 0.5)),
        aggregation="token-mean",
    )
    denom = objectives.denominator(spec, bt["mask_BxT"])
    loss, sums = objectives.policy_loss(spec, lp, mb, denom)
    pg, _ = losses.ppo_clip_objective(lp, bt["old_logps_BxT"], adv, bt["mask_BxT"])
    kl = h2sd.sampled_reverse_kl_loss(lp, bt["old_logps_BxT"], bt["hint_logps_BxT"], bt["mask_BxT"])
    kl = np.where(bt["correct_B"][:, None], 0.0, np.asarray(kl))
    want = (np.asarray(pg) + 0.5 * kl).sum() / bt["mask_BxT"].sum()
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert float(sums["reverse_kl"]) == pytest.approx(kl.sum(), rel=1e-5)


def test_rlsd_magnitude_rule_is_h2sd_success_side_on_every_row_and_grpo_without_a_gap():
    rng = np.random.default_rng(3)
    bt = _batch(rng)
    m, s = bt["mask_BxT"], bt["old_logps_BxT"]
    adv = np.repeat(rng.normal(size=(12, 1)), 6, 1).astype(np.float32) * m
    hp = {n: config.default_config().credit[n].to_dict() for n in ("rlsd", "h2sd")}
    hp["rlsd"]["rule"] = "magnitude"  # ours (the reference rule: core/rlsd.py's tests)
    got = np.asarray(credit.apply_transforms(["rlsd"], adv, bt, hp))
    h2 = np.asarray(credit.apply_transforms(["h2sd"], adv, bt, hp))
    ok = bt["correct_B"]
    np.testing.assert_allclose(got[ok], h2[ok], atol=1e-6)  # successes: the same modulation
    assert np.abs(got[~ok] - h2[~ok]).max() > 1e-3  # failures: no reverse-KL reward
    assert (np.sign(got[m]) == np.sign(adv[m])).all()  # magnitude only
    row_sum = (got * m).sum(-1)
    np.testing.assert_allclose(row_sum, (adv * m).sum(-1), atol=1e-5)  # renorm keeps Σ_t A_t
    bt["hint_logps_BxT"] = s  # no teacher/student gap: m_t = 1, GRPO exactly
    same = np.asarray(credit.apply_transforms(["rlsd"], adv, bt, hp))
    np.testing.assert_allclose(same, adv, atol=1e-6)


@pytest.mark.parametrize("rows", ["all", "failed"])
def test_full_and_topk_kl_losses_match_the_kernels(rows):
    import jax

    from rlvr_jax.core import h2sd as h2sd_lib

    rng = np.random.default_rng(5)
    b, t, d, v = 6, 5, 4, 23
    mask = rng.random((b, t)) < 0.8
    correct = np.array([True, False, True, False, False, True])
    mb = {
        "mask_BxT": mask,
        "old_logps_BxT": rng.normal(-1, 0.3, (b, t)).astype(np.float32),
        "adv_BxT": rng.normal(size=(b, t)).astype(np.float32) * mask,
        "correct_B": correct,
        "hidden_BxTxD": rng.normal(size=(b, t, d)).astype(np.float32),
        "output_kernel_DxV": rng.normal(size=(d, v)).astype(np.float32),
        "teacher_hidden_BxTxD": rng.normal(size=(b, t, d)).astype(np.float32),
        "teacher_kernel_DxV": rng.normal(size=(d, v)).astype(np.float32),
    }
    logits = mb["hidden_BxTxD"] @ mb["output_kernel_DxV"]
    logp_t = jax.nn.log_softmax(mb["teacher_hidden_BxTxD"] @ mb["teacher_kernel_DxV"], -1)
    logps = np.take_along_axis(jax.nn.log_softmax(logits, -1), rng.integers(0, v, (b, t, 1)), -1)
    logps = np.asarray(logps[..., 0])
    hp = dict(rows=rows, rl_coef=0.0, kl_coef=0.7, eps_low=0.2, eps_high=0.2)
    loss, stats = objectives.POLICY_LOSSES.get("opd_full_kl").fn(
        logps, mb["old_logps_BxT"], mb["adv_BxT"], mask, mb=mb, chunk=8, **hp
    )
    kl = h2sd_lib.full_reverse_kl(logits, logp_t, mask)  # the unchunked reference
    if rows == "failed":  # H²SD's failure side is exactly full_reverse_kl_loss
        want = h2sd_lib.full_reverse_kl_loss(logits, logp_t, correct, mask, coef=0.7)
    else:
        want = 0.7 * kl
    np.testing.assert_allclose(np.asarray(loss), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert np.asarray(stats["reverse_kl"]).max() > 0
    # top-k: the teacher's 5 best tokens; KL renormalised on them.
    top_v, top_i = jax.lax.top_k(logp_t, 5)
    mb.update(teacher_topk_logps_BxTxK=np.asarray(top_v), teacher_topk_ids_BxTxK=np.asarray(top_i))
    loss_k, _ = objectives.POLICY_LOSSES.get("opd_topk_kl").fn(
        logps, mb["old_logps_BxT"], mb["adv_BxT"], mask, mb=mb, **hp
    )
    ls = jax.nn.log_softmax(np.take_along_axis(logits, np.asarray(top_i), -1), -1)
    lt = jax.nn.log_softmax(top_v, -1)
    kl_k = np.sum(np.exp(ls) * (ls - lt), -1)
    sel = mask & (~correct[:, None] if rows == "failed" else True)
    np.testing.assert_allclose(np.asarray(loss_k), np.where(sel, 0.7 * kl_k, 0), atol=1e-5)
    # rl_coef adds the PPO surrogate.
    hp["rl_coef"] = 1.0
    loss_rl, _ = objectives.POLICY_LOSSES.get("opd_full_kl").fn(
        logps, mb["old_logps_BxT"], mb["adv_BxT"], mask, mb=mb, chunk=8, **hp
    )
    pg, _ = objectives.ppo_clip(
        logps, mb["old_logps_BxT"], mb["adv_BxT"], mask, eps_low=0.2, eps_high=0.2, dual_clip=0
    )
    np.testing.assert_allclose(np.asarray(loss_rl), np.asarray(pg + want), rtol=1e-5, atol=1e-6)


def test_kl_losses_need_their_teacher_signal():
    for loss, signal in (("opd_full_kl", "teacher_hidden"), ("opd_topk_kl", "teacher_topk")):
        c = config.default_config()
        c.loss.name = loss
        with pytest.raises(ValueError, match=signal):
            config.validate(c)
        c.score.signals = signal
        config.validate(c)
