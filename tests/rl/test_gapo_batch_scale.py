"""GAPO's Ā over the whole minibatch (`gapo_batch_scale`, the update's minibatch statistics)
makes the bounds split-invariant; the micro-batch's own Ā would not."""

import numpy as np

from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.rl import objectives
from rlvr_jax.rl.methods import gapo as gs


def _batch(b=8, t=5):
    rng = np.random.default_rng(4)
    mask = np.ones((b, t), bool)
    mask[0, 3:] = False
    # Rows 0–3 have small advantages, rows 4–7 large ones (plus one zero-advantage row).
    adv_B = np.array([0.1, -0.2, 0.15, 0.0, 2.0, -1.5, 1.8, -2.2], np.float32)
    old = rng.normal(-2, 0.3, (b, t)).astype(np.float32)
    return {
        "mask_BxT": mask,
        "old_logps_BxT": old,
        "adv_BxT": np.where(mask, adv_B[:, None], 0).astype(np.float32),
        "logps_BxT": (old + rng.normal(0, 0.4, (b, t))).astype(np.float32),
        "group_success_B": np.full(b, 0.5, np.float32),
    }


def test_batch_scale_is_the_mean_nonzero_abs_advantage():
    b = _batch()
    want = np.mean([0.1, 0.2, 0.15, 2.0, 1.5, 1.8, 2.2])
    np.testing.assert_allclose(gs.gapo_batch_scale(b["adv_BxT"], b["mask_BxT"]), want, rtol=1e-6)
    assert gs.gapo_batch_scale(np.zeros((2, 3)), np.ones((2, 3), bool)) == 0.0


SPEC = objectives.LossSpec(
    name="gapo",
    hparams=(("eps_high", 0.2), ("eps_low", 0.2), ("eps_max", 0.5), ("eps_min", 0.1),
             ("ref_scale", 0.0)),
    aggregation="token-mean",
)  # fmt: skip


def _loss(b, rows, denom, stats_rows):
    mb = {k: v[rows] for k, v in b.items()}
    stats = objectives.minibatch_stats(SPEC, {k: v[stats_rows] for k, v in b.items()})
    return float(objectives.policy_loss(SPEC, mb["logps_BxT"], mb, denom, minibatch=stats)[0])


def test_micro_batch_split_keeps_the_bounds_with_the_minibatch_scale():
    b = _batch()
    denom = float(b["mask_BxT"].sum())
    halves = [slice(0, 4), slice(4, 8)]
    whole = _loss(b, slice(None), denom, slice(None))
    split = sum(_loss(b, r, denom, slice(None)) for r in halves)  # Ā of the whole minibatch
    np.testing.assert_allclose(split, whole, rtol=1e-6)
    own = sum(_loss(b, r, denom, r) for r in halves)  # each micro-batch's own Ā: bounds move
    assert abs(whole - own) > 1e-4
    scale = gs.gapo_batch_scale(b["adv_BxT"], b["mask_BxT"])
    # And ref_scale = Ā of the whole batch reproduces the unsplit default bounds.
    adv_B, valid_B = gapo_lib.sequence_advantages(b["adv_BxT"], b["mask_BxT"])
    kw = dict(eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5)
    np.testing.assert_allclose(
        gapo_lib.adaptive_clip_bounds(adv_B, valid_B, ref_scale=scale, **kw),
        gapo_lib.adaptive_clip_bounds(adv_B, valid_B, **kw),
        rtol=1e-6,
    )
