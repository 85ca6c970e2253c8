import numpy as np
import pytest

from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.core import losses
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import credit, objectives

# config.score.signals that provide the fields each transform requires.
SIGNALS_FOR = {"cscr": "cscr_shift"}


def _batch(seed=0, b=8, t=6):
    rng = np.random.default_rng(seed)
    mask = rng.random((b, t)) < 0.8
    mask[0] = False
    adv_B = rng.normal(size=b).astype(np.float32)
    old = rng.normal(-2, 0.3, (b, t)).astype(np.float32)
    return {
        "mask_BxT": mask,
        "old_logps_BxT": old,
        "adv_BxT": np.where(mask, adv_B[:, None], 0).astype(np.float32),
        "logps_BxT": (old + rng.normal(0, 0.3, (b, t))).astype(np.float32),
        "cf_shift_correct_BxT": rng.normal(0, 1, (b, t)).astype(np.float32),
        "cf_shift_incorrect_BxT": rng.normal(0, 1, (b, t)).astype(np.float32),
    }


@pytest.mark.parametrize("name", ["gapo", "gapo_gspo"])
def test_gapo_losses_are_selectable_and_match_the_kernels(name):
    c = config_lib.default_config()
    c.loss.name = name
    c.loss.aggregation = "seq-mean-token-mean"
    c.score.signals = "group_success"  # the clip-rate-by-success diagnostics read it
    config_lib.validate(c)
    hp = c.loss[name].to_dict()
    spec = objectives.LossSpec(
        name=name, hparams=tuple(sorted(hp.items())), aggregation=c.loss.aggregation
    )
    mb = _batch(1)
    mb["group_success_B"] = np.full(len(mb["mask_BxT"]), 0.5, np.float32)
    m = mb["mask_BxT"]
    denom = objectives.denominator(spec, m)
    stats = objectives.minibatch_stats(spec, mb)  # Ā of this (whole) minibatch
    loss, sums = objectives.policy_loss(spec, mb["logps_BxT"], mb, denom, minibatch=stats)
    args = (mb["logps_BxT"], mb["old_logps_BxT"])
    if name == "gapo":
        want_BxT, stats = gapo_lib.gapo_ppo_objective(*args, mb["adv_BxT"], m, **hp)
        clip_hi = stats["clip_high_BxT"]
    else:
        adv_B, _ = gapo_lib.sequence_advantages(mb["adv_BxT"], m)
        loss_B, stats = gapo_lib.gapo_gspo_objective(*args, adv_B, m, **hp)
        want_BxT = loss_B[:, None] * m
        clip_hi = stats["clip_high_B"][:, None] * m
    want = losses.aggregate_with_denominator(want_BxT, m, "seq-mean-token-mean", denom)
    np.testing.assert_allclose(loss, want, rtol=1e-6)
    np.testing.assert_allclose(sums["clip_high"], np.sum(clip_hi), rtol=1e-6)
    assert "eps_high" in sums and sums["eps_high"] > 0


def test_cscr_is_selectable_and_matches_the_kernel():
    c = config_lib.default_config()
    c.credit.transforms = "cscr"
    c.credit.cscr.alpha = 0.5
    c.score.signals = SIGNALS_FOR["cscr"]
    config_lib.validate(c)
    b = _batch(2)
    hp = {"cscr": c.credit.cscr.to_dict()}
    got = credit.apply_transforms(config_lib.transform_names(c), b["adv_BxT"], b, hp)
    want = cscr_lib.cscr_advantages(
        b["adv_BxT"],
        b["cf_shift_correct_BxT"],
        b["cf_shift_incorrect_BxT"],
        b["mask_BxT"],
        alpha=0.5,
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    del b["cf_shift_incorrect_BxT"]
    with pytest.raises(ValueError, match="cf_shift_incorrect_BxT"):
        credit.apply_transforms(["cscr"], b["adv_BxT"], b, hp)
