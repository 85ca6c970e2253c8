import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.core import gar as gar_lib
from rlvr_jax.core import losses
from rlvr_jax.models import init_model
from rlvr_jax.rl import config as config_lib
from rlvr_jax.rl import credit, objectives
from rlvr_jax.rl.methods import gradient_signals as gs
from rlvr_jax.testing import tiny_config

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
    config_lib.validate(c)
    hp = c.loss[name].to_dict()
    spec = objectives.LossSpec(
        name=name, hparams=tuple(sorted(hp.items())), aggregation=c.loss.aggregation
    )
    mb = _batch(1)
    m = mb["mask_BxT"]
    denom = objectives.denominator(spec, m)
    loss, sums = objectives.policy_loss(spec, mb["logps_BxT"], mb, denom)
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


def _ref_signature(logits, hidden, w_dv, tokens, attn, mask, variant):
    """From the model's full logits (no chunking), in float64."""
    logits, hidden, w_dv = (np.asarray(x, np.float64) for x in (logits, hidden, w_dv))
    out = []
    for i in range(tokens.shape[0]):
        s = np.zeros(w_dv.shape[0])
        for t in range(1, tokens.shape[1]):
            if mask[i, t] and attn[i, t]:
                z = logits[i, t - 1]
                p = np.exp(z - z.max())
                p /= p.sum()
                p[tokens[i, t]] -= 1
                g = w_dv @ p
                s += g * hidden[i, t - 1] if variant == "grad_hidden" else g
        n = np.linalg.norm(s)
        out.append(s / n if n > 0 else s)
    return np.array(out)


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])  # untied and tied output projection
def test_gar_signatures_from_model_match_full_logits(family):
    graphdef, state = nnx.split(init_model(tiny_config(family), seed=0))
    rng = np.random.default_rng(0)
    b, t = 4, 9
    tokens = rng.integers(3, 120, (b, t)).astype(np.int32)
    attn = np.ones((b, t), bool)
    attn[1, :3] = False  # left padding
    mask = np.zeros((b, t), bool)
    mask[:, 5:] = True
    mask[3] = False  # no response token

    @jax.jit
    def run(state):
        model = nnx.merge(graphdef, state)
        out = model.forward(tokens, attn, return_hidden=True)
        sigs = [
            gs.gar_signatures_from_model(model, tokens, attn, mask, variant=v, chunk=40)
            for v in gar_lib.VARIANTS
        ]
        return out.logits, out.hidden, model.output_kernel(), sigs

    logits, hidden, w_dv, sigs = run(state)
    for variant, got in zip(gar_lib.VARIANTS, sigs, strict=True):
        want = _ref_signature(logits, hidden, w_dv, tokens, attn, mask, variant)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # model matmuls in f32
        assert np.all(np.asarray(got[3]) == 0)


def test_gar_rewards_from_signatures():
    rng = np.random.default_rng(3)
    g, k, per, d = 2, 2, 3, 5
    sig = rng.normal(size=(g * per, d)).astype(np.float32)
    anchors = rng.normal(size=(g, k, d)).astype(np.float32)
    valid = np.array([[True, True], [True, False]])
    group = np.repeat(np.arange(g), per).astype(np.int32)
    correct = np.array([1, 1, 0, 1, 1, 1], bool)
    rewards, align = gs.gar_rewards_from_signatures(sig, anchors, valid, group, correct, beta=0.5)
    want_align, has = gar_lib.anchor_alignment(
        sig, jnp.asarray(anchors)[group], jnp.asarray(valid)[group]
    )
    np.testing.assert_allclose(align, want_align, rtol=1e-6)
    np.testing.assert_allclose(
        rewards, gar_lib.gar_rewards(want_align, correct, group, g, beta=0.5), rtol=1e-6
    )
    # Jittable end to end.
    jitted = jax.jit(gs.gar_rewards_from_signatures)
    np.testing.assert_allclose(jitted(sig, anchors, valid, group, correct)[0], rewards, rtol=1e-6)
