"""The seed methods' experiment files (credit / loss family): config contents and 2-step pulses.

Each file under experiments/<slug>/ listed in METHODS loads in every variant,
validates, is locked and sets the transform / loss / signals / hyperparameters
it claims; the slow pulse trains it 2 steps on a tiny random model and checks
that the method's score-stage fields reached the batch with the right shapes.
"""

import importlib.util
import json
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import transform_names, validate

from .test_trainer import _parity_rewards

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
VARIANTS = ("", "arithmetic", "pulse")

# experiments/<key>.py -> what it must set. `fields`: dotted config paths and their
# values in the default variant (paper-fixed numbers and our stated choices).
METHODS = {
    "cliff/cliff": dict(
        transforms="cliff",
        signals="first_mistake",
        fields={
            "task.name": "arithmetic",
            "model.domain": "arithmetic",
            "credit.cliff.a": 1.0,
            "score.first_mistake.locator": "judge",
        },
    ),
    "cliff/cliff_exact": dict(
        transforms="cliff",
        signals="first_mistake",
        fields={"score.first_mistake.locator": "exact", "task.name": "arithmetic"},
    ),
    "cliff/cliff_noisy": dict(
        transforms="cliff",
        signals="first_mistake",
        fields={"score.first_mistake.locator": "noisy", "score.first_mistake.error_rate": 0.3},
    ),
    "gapo/gapo": dict(loss="gapo", fields={"loss.gapo.eps_low": 0.2, "loss.gapo.eps_min": 0.1}),
    "gapo/gapo_gspo": dict(
        loss="gapo_gspo",
        fields={"loss.gapo_gspo.eps_high": 4e-4, "loss.aggregation": "seq-mean-token-mean"},
    ),
    "opsa/opsa": dict(transforms="opsa", fields={"credit.opsa.c": 1.0, "credit.opsa.rl_coef": 0.0}),
    "opdvr/opdvr": dict(
        transforms="opdvr",
        signals="teacher",
        fields={"credit.opdvr.gate": "relu", "credit.opdvr.rl_coef": 0.0},
    ),
    "seq_opd_rl/seq_opd_rl": dict(
        transforms="opd_additive", signals="teacher", fields={"credit.opd_additive.weight": 1.0}
    ),
    "saf_opd/saf_opd": dict(
        transforms="saf_opd",
        signals="teacher",
        fields={"credit.saf_opd.keep_frac": 0.2, "credit.saf_opd.anneal_steps": 12},
    ),
    "rstg/rstg": dict(
        transforms="rstg", signals="teacher", fields={"credit.rstg.token_select": "either"}
    ),
    "cue_grpo/cue_grpo": dict(
        transforms="cue_grpo", signals="cue", fields={"credit.cue_grpo.alpha": 1.0}
    ),
    "cscr/cscr": dict(
        transforms="cscr", signals="cscr_shift", fields={"credit.cscr.combine": "mean"}
    ),
    "dash/dash": dict(
        transforms="dash",
        signals="teacher",
        teacher="hint",  # a self-teacher in every variant
        fields={"credit.dash.outcome_coef": 0.0, "credit.dash.h_max": 8},
    ),
    "cpo/cpo": dict(
        transforms="cpo",
        signals="hint",
        fields={"credit.cpo.lam_wrong": 0.1, "score.hint.correct_template": ""},
    ),
    "cpo/entropy_shaping": dict(
        transforms="entropy_shaping",
        fields={"credit.entropy_shaping.alpha": 0.4, "credit.entropy_shaping.kappa": 2.0},
    ),
    "h2sd/h2sd": dict(
        transforms="h2sd",
        loss="h2sd_kl",
        signals="hint",
        # The failed rows' reverse KL is counted once, in the loss.
        fields={"credit.h2sd.kl_coef": 0.0, "loss.h2sd_kl.kl_coef": 1.0},
    ),
    "h2sd/rlsd": dict(
        transforms="rlsd",
        signals="hint",
        fields={"credit.rlsd.low": 0.5, "credit.rlsd.renorm": True},
    ),
    "cbpo/cbpo": dict(transforms="cbpo", signals="branches", fields={"credit.cbpo.s_min": 0.1}),
    "om_grpo/om_grpo": dict(
        transforms="om_grpo", signals="answers", fields={"credit.om_grpo.mask_answer": True}
    ),
    "om_grpo/om_grpo_contrast": dict(
        transforms="om_grpo_contrast",
        signals="answers,pair_compare",
        fields={"credit.om_grpo_contrast.lam": 0.5, "score.pair_compare.judge": "consensus"},
    ),
    "om_grpo/ttrl": dict(signals="answers,majority_vote", fields={"data.group_size": 8}),
    "oc_grpo/oc_grpo": dict(loss="oc_grpo", signals="behaviour", fields={"loss.oc_grpo.cap": 2.0}),
    "lspo/lspo": dict(
        loss="lspo", signals="behaviour", fields={"loss.lspo.length_normalise": True}
    ),
    "gar/gar": dict(signals="gar", fields={"score.gar.beta": 0.5}),
    "hl_gauss/hl_gauss": dict(
        credit="gae",
        fields={
            "critic.enabled": True,
            "critic.loss": "hl_gauss",
            "critic.sigma_ratio": 0.75,
            "critic.num_bins": 51,
        },
    ),
}
SLUGS = sorted({k.split("/")[0] for k in METHODS})


def load(name: str, variant: str = "") -> ml_collections.ConfigDict:
    spec = importlib.util.spec_from_file_location(
        name.replace("/", "."), EXPERIMENTS / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


def _get(c, dotted):
    for part in dotted.split("."):
        c = c[part]
    return c


def test_every_method_file_is_listed():
    found = sorted(f"{slug}/{p.stem}" for slug in SLUGS for p in (EXPERIMENTS / slug).glob("*.py"))
    assert found == sorted(METHODS)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_config_names_its_stages(name, variant):
    want = METHODS[name]
    c = load(name, variant)
    validate(c)
    assert c.is_locked
    assert c.credit.name == want.get("credit", "grpo")
    assert transform_names(c) == [t for t in want.get("transforms", "").split(",") if t]
    assert c.loss.name == want.get("loss", "ppo_clip")
    assert signals.signal_names(c) == [s for s in want.get("signals", "").split(",") if s]
    if variant == "pulse":  # nothing to train first: tiny random policy, self-teachers
        assert c.model.source == "random" and c.train.steps == 2
        if "teacher" in signals.signal_names(c):
            assert c.score.teacher.source == "hint"
    else:
        assert c.model.source == "warm_start" and c.model.domain == c.task.name
        if variant == "arithmetic":
            assert c.task.name == "arithmetic"
        if "teacher" in signals.signal_names(c):  # the warm-start teacher of the same domain
            assert c.score.teacher.source == want.get("teacher", "warm_start")
            assert c.score.teacher.domain in ("", c.model.domain)
    if variant == "":
        for field, value in want["fields"].items():
            assert _get(c, field) == value, field


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_listed_signal_feeds_the_method(name):
    """No superfluous signal: each provides a field the transforms / loss read (or the reward)."""
    c = load(name)
    read = {"rewards_B"}
    for t in transform_names(c):
        read.update(credit.TRANSFORMS.get(t).requires)
    read.update(objectives.POLICY_LOSSES.get(c.loss.name).requires)
    for s in signals.signal_names(c):
        read.update(signals.SIGNALS.get(s).requires)
    for s in signals.signal_names(c):
        assert set(signals.provides(s)) & read, s


def test_cliff_refuses_countdown():
    with pytest.raises(ValueError, match="step verifier"):
        load("cliff/cliff", "countdown")


# ----------------------------------------------------------------------------- pulses
def _signal_fields(c) -> list[str]:
    out = [f for s in signals.signal_names(c) for f in signals.provides(s)]
    if c.critic.enabled:
        out += ["old_values_BxT", "returns_BxT"]
    return out


def _expected_shape(field, rows, length, nodes):
    if field.endswith(("_BxTxD", "_BxTxK")):  # per-token vectors: hidden states, top-k
        return (rows, length)
    dims = {"B": rows, "T": length, "K": nodes}
    return tuple(dims[d] for d in field.rsplit("_", 1)[1].split("x"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_has_a_pulse(name, tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    batches = []
    original = trainer_lib.Trainer._batch

    def keep_batch(self, groups):
        b = original(self, groups)
        batches.append({k: np.asarray(v) for k, v in b.items()})
        return b

    monkeypatch.setattr(trainer_lib.Trainer, "_batch", keep_batch)
    c = load(name, "pulse")
    c.eval.at_start = False
    c.checkpoint.export_final = False
    trainer_lib.train(c, tmp_path)

    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert [x["step"] for x in train] == [1, 2]
    losses = [x["loss"] for x in train if "loss" in x]  # a critic warm-up step has none
    assert losses and np.all(np.isfinite(losses))
    if c.critic.enabled:
        assert all(np.isfinite(x["value_loss"]) for x in train)

    assert len(batches) == 2
    rows = c.data.prompts_per_step * c.data.group_size
    for b in batches:
        mask = b["mask_BxT"].astype(bool)
        assert mask.shape[0] == rows and mask.any()
        nodes = c.score.branches.max_nodes or rows
        for field in _signal_fields(c):
            x = b[field]
            want = _expected_shape(field, rows, mask.shape[1], nodes)
            assert x.shape[: len(want)] == want, field
            assert np.isfinite(x).all(), field
            if field.endswith("_logps_BxT"):  # log-probs of the sampled tokens, 0 off the mask
                assert (x[mask] <= 0).all() and (x[~mask] == 0).all(), field
        adv = b["adv_BxT"]
        assert adv.shape == mask.shape and np.isfinite(adv).all()
        assert (adv[~mask] == 0).all()
        if name == "opsa/opsa":  # −c·H/mean H: non-positive, masked mean −c
            assert (adv[mask] <= 0).all()
            np.testing.assert_allclose(adv[mask].mean(), -c.credit.opsa.c, rtol=1e-4)
        if name == "gar/gar":  # parity rewards 0/1: passing rows 1 + β·bonus, failing 0
            r, ok = b["rewards_B"], b["correct_B"].astype(bool)
            assert (r[ok] >= 1).all() and (r[ok] <= 1 + 2 * c.score.gar.beta).all()  # cos gap ≤ 2
            assert (r[~ok] == 0).all()
        if c.critic.enabled and c.critic.loss == "hl_gauss":  # expected bin centres
            v = b["old_values_BxT"][mask]
            assert (v >= c.critic.v_min).all() and (v <= c.critic.v_max).all()
