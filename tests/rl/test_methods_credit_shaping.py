"""The credit-shaping registrations: selectable by config, same numbers as the kernels."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the plug-ins)
from rlvr_jax.core import advantages as adv_lib
from rlvr_jax.core import cbpo, cliff, cue, dash, off_context, om_grpo
from rlvr_jax.rl import config, credit, objectives

TRANSFORMS = ("cliff", "cue_grpo", "dash", "cbpo", "om_grpo", "om_grpo_contrast", "answer_mask")
LOSSES = ("oc_grpo", "lspo")
B, T = 8, 6
# config.score.signals that provide the fields each transform / loss requires.
SIGNALS = {
    "cliff": "first_mistake",
    "cue_grpo": "cue",
    "cbpo": "branches",
    "om_grpo": "answers",
    "om_grpo_contrast": "answers,pair_compare",
    "answer_mask": "answers",
    "dash": "teacher",
}


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(2), 4).astype(np.int32)
    correct = np.array([1, 1, 1, 0, 1, 0, 1, 0], bool)  # mixed groups, cues 0, 0, 1 in group 0
    mask = np.ones((B, T), bool)
    mask[:, :2] = False  # prompt columns
    mask[3, 4:] = False
    valid = np.ones(B, bool)
    old = rng.normal(-1.0, 0.5, (B, T)).astype(np.float32)
    batch = {
        "tokens_BxT": rng.integers(5, 50, (B, T)).astype(np.int32),
        "attention_mask_BxT": np.ones((B, T), bool),
        "mask_BxT": mask,
        "old_logps_BxT": old,
        "entropy_BxT": rng.random((B, T)).astype(np.float32),
        "rewards_B": correct.astype(np.float32),
        "correct_B": correct,
        "group_B": group,
        "valid_B": valid,
        "first_mistake_B": np.array([1, -1, 0, 5, 2, 1, -1, 3], np.int32),
        "cue_B": np.array([0, 0, 1, -1, 2, 2, 2, 0], np.int32),
        "teacher_logps_BxT": (old + rng.normal(0, 0.5, (B, T))).astype(np.float32),
        "branch_member_KxB": np.array([[1, 1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0]], bool),
        "branch_pos_K": np.array([1, -1], np.int32),  # node 1 is padding
        "branch_start_B": np.array([0, 1, 1, 0, 0, 0, 0, 0], np.int32),
        "branch_offset_B": np.zeros(B, np.int32),
        # Rows 0, 1, 2 share their first token (the node at 1); the others nothing.
        "branch_shared_BxB": np.pad(np.ones((3, 3), np.int32), (0, B - 3)),
        "answer_id_B": np.array([3, 3, 1, -1, 2, 2, 2, 5], np.int32),
        "answer_start_B": np.array([2, -1, 3, 0, 1, 2, 3, -1], np.int32),
        "answer_end_B": np.array([4, -1, 4, 1, 3, 4, 4, -1], np.int32),
        "pair_wins_BxB": rng.random((B, B)).astype(np.float32),
        "pair_compared_BxB": rng.random((B, B)) < 0.5,
    }
    adv = adv_lib.broadcast_to_tokens(
        adv_lib.grpo_advantages(batch["rewards_B"], group, 2, valid_B=valid), mask
    )
    return np.asarray(adv), batch


def _defaults(name):
    return config.default_config().credit[name].to_dict()


@pytest.mark.parametrize("name", TRANSFORMS)
def test_transform_selectable_by_config(name):
    c = config.default_config()
    c.credit.transforms = name
    c.score.signals = SIGNALS.get(name, "")
    config.validate(c)
    assert config.transform_names(c) == [name]
    assert set(c.credit[name].to_dict()) == set(credit.TRANSFORMS.get(name).defaults)


@pytest.mark.parametrize("name", LOSSES)
def test_loss_selectable_by_config(name):
    c = config.default_config()
    c.loss.name = name  # behaviour_logps_BxT (μ) is a field of every batch: no signal
    config.validate(c)
    assert c.loss[name].cap == 2.0


def _kernel(name, adv, b, hp):
    m, g, v = b["mask_BxT"], b["group_B"], b["valid_B"]
    if name == "cliff":
        return cliff.cliff_advantages(adv, m, b["correct_B"], b["first_mistake_B"], **hp)
    if name == "cue_grpo":
        return cue.cue_rarity_advantages(adv, m, g, b["cue_B"], valid_B=v, **hp)
    if name == "dash":
        a, _ = dash.dash_advantages(
            b["teacher_logps_BxT"], b["old_logps_BxT"], m,
            gamma=hp["gamma"], h_min=hp["h_min"], h_max=hp["h_max"], kappa=hp["kappa"],
        )  # fmt: skip
        return hp["outcome_coef"] * adv + hp["coef"] * a
    if name == "cbpo":
        pos, hp = b["branch_pos_K"], dict(hp)
        zero_sum = hp.pop("zero_sum")
        out, _ = cbpo.cbpo_advantages(
            adv, m, b["rewards_B"], b["branch_member_KxB"], pos, b["branch_start_B"],
            valid_K=pos >= 0, offset_B=b["branch_offset_B"], shared_BxB=b["branch_shared_BxB"],
            **hp,
        )  # fmt: skip
        return cbpo.zero_sum_per_group(out, m, g, len(g)) if zero_sum else out
    if name == "answer_mask":
        return adv * om_grpo.answer_span_mask(m, b["answer_start_B"], b["answer_end_B"])
    r = om_grpo.soft_consensus_rewards(b["answer_id_B"], g, leave_one_out=hp["leave_one_out"])
    if name == "om_grpo_contrast":
        r, _ = om_grpo.contrast_augmented_rewards(
            r, b["pair_wins_BxB"], b["pair_compared_BxB"], g, lam=hp["lam"]
        )
    a_B = adv_lib.grpo_advantages(r, g, 2, eps=hp["eps"])
    return adv_lib.broadcast_to_tokens(
        a_B, om_grpo.answer_span_mask(m, b["answer_start_B"], b["answer_end_B"])
    )


@pytest.mark.parametrize("name", TRANSFORMS)
def test_apply_transforms_gives_the_kernel_numbers(name):
    adv, batch = _batch()
    hp = _defaults(name)
    got = credit.apply_transforms([name], adv, batch, {name: hp})
    np.testing.assert_allclose(got, _kernel(name, adv, batch, hp), rtol=1e-6, atol=1e-6)
    assert np.isfinite(np.asarray(got)).all()
    assert (np.asarray(got)[~batch["mask_BxT"]] == 0).all()
    if name not in ("om_grpo", "om_grpo_contrast", "answer_mask"):
        assert not np.allclose(got, adv)  # the transform did something on this batch


def test_cliff_then_cue_chain_in_order():
    adv, batch = _batch(1)
    hp = {n: _defaults(n) for n in ("cliff", "cue_grpo")}
    got = credit.apply_transforms(["cliff", "cue_grpo"], adv, batch, hp)
    want = _kernel("cue_grpo", _kernel("cliff", adv, batch, hp["cliff"]), batch, hp["cue_grpo"])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_missing_signal_is_a_clear_error(name):
    adv, batch = _batch()
    field = credit.TRANSFORMS.get(name).requires[-1]
    del batch[field]
    with pytest.raises(ValueError, match=field):
        credit.apply_transforms([name], adv, batch, {name: _defaults(name)})


@pytest.mark.parametrize("name,level", [("oc_grpo", "token"), ("lspo", "sequence")])
def test_policy_loss_gives_the_kernel_numbers(name, level):
    adv, batch = _batch(2)
    rng = np.random.default_rng(3)
    behaviour = batch["teacher_logps_BxT"].copy()
    behaviour[0] = batch["old_logps_BxT"][0] - 1.0  # π_old/μ = e > C: truncated in both forms
    mb = {
        "mask_BxT": batch["mask_BxT"],
        "old_logps_BxT": batch["old_logps_BxT"],
        "adv_BxT": adv + rng.normal(0, 0.1, adv.shape).astype(np.float32),
        "behaviour_logps_BxT": behaviour,
    }
    lp = jnp.asarray(batch["old_logps_BxT"] + rng.normal(0, 0.2, (B, T)), jnp.float32)
    hp = config.default_config().loss[name].to_dict()
    assert hp["level"] == level
    spec = objectives.LossSpec(
        name=name, hparams=tuple(sorted(hp.items())), aggregation="token-mean"
    )
    denom = objectives.denominator(spec, mb["mask_BxT"])
    loss, sums = objectives.policy_loss(spec, lp, mb, denom)
    want_BxT, stats = off_context.off_context_objective(
        lp, mb["old_logps_BxT"], mb["behaviour_logps_BxT"], mb["adv_BxT"], mb["mask_BxT"], **hp
    )
    m = batch["mask_BxT"]
    np.testing.assert_allclose(loss, np.asarray(want_BxT)[m].sum() / m.sum(), rtol=1e-6)
    np.testing.assert_allclose(
        sums["is_weight"], np.asarray(stats["is_weight_BxT"]).sum(), rtol=1e-6
    )
    assert 0 < float(sums["is_truncated"]) < m.sum()  # some, not all, weights truncated
    del mb["behaviour_logps_BxT"]
    with pytest.raises(ValueError, match="behaviour_logps_BxT"):
        objectives.policy_loss(spec, lp, mb, denom)
