"""The seed methods' experiment files (credit / loss family): config contents and 2-step pulses.

Each file under experiments/<slug>/ listed in METHODS loads in every variant,
validates, is locked and sets the transform / loss / signals / hyperparameters
it claims; the slow pulse trains it 2 steps on a tiny random model, checks that
the method's score-stage fields reached the batch with the right shapes, and
that its defining quantity moved in the run (`DEFINING`: mistakes located and a
prefix flipped, ≥ 2 cue clusters, clip bounds that differ per rollout, a gate
that closes, a schedule weight that moves, ...), not just that it is finite.
"""

import importlib.util
import json
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from rlvr_jax.core import dash as dash_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.core import om_grpo as om_lib
from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.config import transform_names, validate
from rlvr_jax.tasks import CORRECT, arithmetic
from rlvr_jax.tokenizers import cut_at_stop
from rlvr_jax.train.sft import end_of_turn_id

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
    "gapo/gapo": dict(
        loss="gapo",
        signals="group_success",
        fields={"loss.gapo.eps_low": 0.2, "loss.gapo.eps_min": 0.1},
    ),
    "gapo/gapo_gspo": dict(
        loss="gapo_gspo",
        signals="group_success",
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
        fields={
            "credit.cpo.lam_wrong": 0.1,
            "credit.cpo.lam_correct": 0.1,
            "score.hint.correct_template": "",
        },
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
        fields={"credit.h2sd.kl_coef": 0.0, "loss.h2sd_kl.kl_coef": 0.1},
    ),
    "h2sd/h2sd_full": dict(
        transforms="h2sd",
        loss="opd_full_kl",
        signals="hint,teacher_hidden",
        fields={"loss.opd_full_kl.rows": "failed", "score.teacher_hidden.source": "hint"},
    ),
    "opdvr/opd_full_kl": dict(
        loss="opd_full_kl", signals="teacher_hidden", fields={"loss.opd_full_kl.rl_coef": 0.0}
    ),
    "opdvr/opd_topk_kl": dict(
        loss="opd_topk_kl", signals="teacher_topk", fields={"score.teacher_topk.k": 16}
    ),
    "h2sd/rlsd": dict(
        transforms="rlsd",
        signals="hint",
        fields={"credit.rlsd.low": 0.5, "credit.rlsd.renorm": True},
    ),
    "om_grpo/om_grpo": dict(
        transforms="om_grpo", signals="answers", fields={"credit.om_grpo.mask_answer": True}
    ),
    "om_grpo/om_grpo_contrast": dict(
        transforms="om_grpo_contrast",
        signals="answers,pair_compare",
        fields={"credit.om_grpo_contrast.lam": 0.5, "score.pair_compare.judge": "consensus"},
    ),
    "om_grpo/ttrl": dict(signals="answers,majority_vote", fields={"data.group_size": 8}),
    "gar/gar": dict(
        signals="gar",
        credit="reinforce_pp",  # the GAR reward is the advantage (reference code)
        fields={
            "score.gar.beta": 0.5,
            "score.gar.min_group": 2,
            "score.gar.aux_combine": "aux_residual",
            "score.gar.aux_weight": 0.5,
            "credit.reinforce_pp.baseline": "none",
            "credit.reinforce_pp.whiten": False,
        },
    ),
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


# Pipeline configs (several stages) in the same directories: tests/pipeline/test_experiments.py.
PIPELINES = {"seq_opd_rl/pipeline", "rstg/rstg_sft"}


def test_every_method_file_is_listed():
    # The rollout-stage methods (oc_grpo, lspo, nc_grpo, agentic, cbpo) have their own
    # directories and pulses in tests/rl/test_rollout_experiments.py.
    # repro.py files declare reproductions (rlvr_jax.repro; tests/repro), not configs.
    found = sorted(
        f"{slug}/{p.stem}"
        for slug in SLUGS
        for p in (EXPERIMENTS / slug).glob("*.py")
        if p.name != "repro.py"
    )
    assert sorted(set(found) - PIPELINES) == sorted(METHODS)


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


# Experiments with several arms of one comparison: arm -> the fields that define it.
ARMS = {
    "cpo/cpo": {
        "balanced": {"credit.cpo.lam_correct": 0.1, "credit.cpo.lam_wrong": 0.1},
        "correct_only": {"credit.cpo.lam_correct": 0.1, "credit.cpo.lam_wrong": 0.0},
        "wrong_only": {"credit.cpo.lam_correct": 0.0, "credit.cpo.lam_wrong": 0.1},
    },
    "gar/gar": {
        "reference": {"credit.name": "reinforce_pp", "credit.reinforce_pp.whiten": False},
        "normalised": {"credit.name": "grpo"},
    },
}


@pytest.mark.parametrize("name", sorted(ARMS))
def test_arms_set_their_fields_and_nothing_else(name):
    default = load(name)
    for arm, fields in ARMS[name].items():
        for base in ("", "arithmetic", "pulse"):
            c = load(name, f"{arm},{base}" if base else arm)
            validate(c)
            for field, value in fields.items():
                assert _get(c, field) == value, (arm, base, field)
            if base == "":  # the arm changes only its own fields
                diff = _diff(default.to_dict(), c.to_dict())
                assert diff <= set(fields) | {"credit.name"}, (arm, diff)
    with pytest.raises(ValueError, match="at most one arm"):
        load(name, ",".join(ARMS[name]))


def _diff(a, b, prefix=""):
    out = set()
    for k in a:
        if isinstance(a[k], dict):
            out |= _diff(a[k], b[k], f"{prefix}{k}.")
        elif a[k] != b[k]:
            out.add(prefix + k)
    return out


def test_cliff_refuses_countdown():
    with pytest.raises(ValueError, match="step verifier"):
        load("cliff/cliff", "countdown")


# ----------------------------------------------------------------------------- pulses
# A tiny random model writes no arithmetic: the methods that read the task's own
# signals (first mistakes, strategy cues, answers, shared prefixes, all-wrong groups)
# pulse on scripted rollouts instead. Per group (G = 4) the rows are rewritten as
# (None keeps the sampled row):
SCRIPT = (
    ("reference", "reference", "other_order", "wrong_last"),  # cue clusters of 2 and 1
    ("reference", "reference", "wrong_last", "wrong_first"),  # shared prefixes, answers
    ("wrong_last", "wrong_first", None, None),  # an all-wrong group
)
SCRIPTED = {
    "cliff/cliff",
    "cliff/cliff_exact",
    "cliff/cliff_noisy",
    "om_grpo/ttrl",
    "cue_grpo/cue_grpo",
    "om_grpo/om_grpo",
    "om_grpo/om_grpo_contrast",
    "rstg/rstg",
}
# Pulse-only overrides where the experiment's own pulse cannot move its quantity.
PULSE_OVERRIDES: dict[str, dict] = {}


def _trace(problem, kind):
    tree = arithmetic.problem_tree(problem)

    def order(node, right_first):
        if node.op is None:
            return []
        kids = (node.right, node.left) if right_first else (node.left, node.right)
        return order(kids[0], right_first) + order(kids[1], right_first) + [node]

    steps = [
        [n.left.value, n.op, n.right.value, n.value] for n in order(tree, kind == "other_order")
    ]
    answer = tree.value
    if kind == "wrong_last":  # every line right except the last: the mistake comes late
        steps[-1][3] += 1
        answer += 1
    elif kind == "wrong_first":  # wrong from the first line on (the verifier reads the answer)
        steps[0][3] += 1
        answer += 1
    lines = [f"{a} {op} {b} = {c}" for a, op, b, c in steps]
    return "\n".join([*lines, f"Answer: {answer}"])


def _scripted_rollouts(monkeypatch):
    """Rewrites the sampled responses by SCRIPT and verifies every row with the task."""
    original = trainer_lib.Trainer.rollout

    def rollout(self, request, key):
        g = original(self, request, key)
        tokenizer, task = self.parts.tokenizer, self.parts.task
        for f in (
            "tokens",
            "attention_mask",
            "response_mask",
            "behaviour_logps",
            "entropy",
            "stopped",
        ):
            setattr(g, f, np.array(getattr(g, f)))  # writable copies
        g.correct = np.array(g.correct)
        eot = end_of_turn_id(tokenizer)
        for r in np.flatnonzero(g.valid):
            p = g.problems[int(g.group[r])]
            kind = SCRIPT[int(g.group[r]) % len(SCRIPT)][int(np.sum(g.group[:r] == g.group[r]))]
            if kind is not None:
                start = int(np.flatnonzero(g.prompt_mask[r])[-1]) + 1
                ids = (tokenizer.encode(_trace(p, kind)) + [eot])[: g.tokens.shape[1] - start]
                g.tokens[r, start:] = 0
                g.tokens[r, start : start + len(ids)] = ids
                g.response_mask[r] = False
                g.response_mask[r, start : start + len(ids)] = True
                g.attention_mask[r] = g.prompt_mask[r] | g.response_mask[r]
                g.behaviour_logps[r] = g.entropy[r] = 0.0
                g.stopped[r] = True
            text = tokenizer.decode(
                cut_at_stop(g.tokens[r][g.response_mask[r]], tokenizer.stop_ids)
            )
            g.correct[r] = task.verify(p, text).reason == CORRECT
        g.rewards = g.correct.astype(np.float32)
        return g

    monkeypatch.setattr(trainer_lib.Trainer, "rollout", rollout)


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


def _grpo(b):
    """The GRPO advantages of the batch's rewards (the input of every credit transform)."""
    entry = credit.ESTIMATORS.get("grpo")
    adv, _ = entry.fn(
        b["rewards_B"],
        b["group_B"],
        b["valid_B"],
        b["mask_BxT"],
        num_groups=int(b["group_B"].max()) + 1,
        values_BxT=None,
        **entry.defaults,
    )
    return np.asarray(adv)


def _row_mean(x, m):
    return (x * m).sum(1) / np.maximum(m.sum(1), 1)


def _moves(a, b, m, tol=1e-4):
    """Some loss token where a and b differ by more than tol."""
    return np.abs(a - b)[m].max(initial=0.0) > tol


# The defining quantity of each method, checked on its pulse: (config, 2 batches, train
# metrics) -> None. Each asserts the method did something GRPO would not.
def _cliff(c, bs, train):
    for b in bs:
        wrong = ~b["correct_B"] & b["valid_B"]
        assert (b["first_mistake_B"][wrong] > 0).any()  # mistakes located after a prefix
    # The prefix before a located mistake flips from −|A| to +|A|.
    assert any((b["mask_BxT"] & (b["adv_BxT"] > 0) & (_grpo(b) < 0)).any() for b in bs)


def _gapo(c, bs, train):
    hp = c.loss[c.loss.name]
    for b in bs:
        m = b["mask_BxT"]
        adv_B = _row_mean(b["adv_BxT"], m)
        lo, _ = gapo_lib.adaptive_clip_bounds(
            adv_B,
            m.any(1),
            eps_low=hp.eps_low,
            eps_high=hp.eps_high,
            eps_min=hp.eps_min,
            eps_max=hp.eps_max,
            ref_scale=hp.ref_scale,
        )
        lo = np.asarray(lo)[np.abs(adv_B) > 1e-6]
        assert np.ptp(lo) > 0  # per-rollout bounds differ
    assert all(np.isfinite(x["eps_low"]) for x in train if "loss" in x)


def _opsa(c, bs, train):
    for b in bs:
        adv, m = b["adv_BxT"], b["mask_BxT"]
        assert (adv[m] <= 0).all() and np.ptp(adv[m]) > 0  # −c·H/mean H: varies with H
        np.testing.assert_allclose(adv[m].mean(), -c.credit.opsa.c, rtol=1e-4)


def _opdvr(c, bs, train):
    for b in bs:
        m, adv = b["mask_BxT"], b["adv_BxT"]
        d = b["teacher_logps_BxT"] - b["old_logps_BxT"]
        assert (m & (adv == 0) & (np.abs(d) > 1e-6)).any()  # the verdict gate closed
        assert (np.abs(adv[m]) > 1e-6).any()  # and let some through


def _teacher_added(c, bs, train):  # seq_opd_rl: A + w·(ℓ^T − ℓ^S)
    w = c.credit.opd_additive.weight
    for b in bs:
        m, d = b["mask_BxT"], b["teacher_logps_BxT"] - b["old_logps_BxT"]
        np.testing.assert_allclose(b["adv_BxT"] - _grpo(b), w * d * m, rtol=1e-4, atol=1e-5)
        assert np.abs(d[m]).max() > 1e-3


def _saf(c, bs, train):
    # The schedule weight moves: w(0) = 0 (GRPO exactly), w(1) = w_max / warm-up > 0.
    assert c.credit.saf_opd.warmup_steps > 1
    b0, b1 = bs
    np.testing.assert_allclose(b0["adv_BxT"], _grpo(b0), atol=1e-6)
    assert _moves(b1["adv_BxT"], _grpo(b1), b1["mask_BxT"])


def _rstg(c, bs, train):
    seen = False
    for b in bs:
        m, a, adv = b["mask_BxT"], _grpo(b), b["adv_BxT"]
        g, ok = b["group_B"], b["correct_B"] & b["valid_B"]
        wrong_group = np.array([not ok[g == x].any() for x in g]) & b["valid_B"]
        np.testing.assert_allclose(adv[~wrong_group], a[~wrong_group], atol=1e-6)
        seen |= _moves(adv[wrong_group], a[wrong_group], m[wrong_group], 1e-6)
    assert seen  # OPD reached the all-wrong groups


def _cue(c, bs, train):
    clusters = 0
    for b in bs:
        ok = b["correct_B"] & b["valid_B"]
        for g in np.unique(b["group_B"]):
            cues = b["cue_B"][ok & (b["group_B"] == g)]
            clusters = max(clusters, len(set(cues[cues >= 0].tolist())))
    assert clusters >= 2
    assert any(_moves(b["adv_BxT"], _grpo(b), b["mask_BxT"]) for b in bs)


def _cscr(c, bs, train):
    for b in bs:
        m, a = b["mask_BxT"], _grpo(b)
        on = m & (np.abs(a) > 1e-6)
        w = b["adv_BxT"][on] / a[on]
        assert (w > 0).all() and np.ptp(w) > 1e-3  # signs kept, weights ≠ 1


def _dash(c, bs, train):
    d = c.credit.dash
    for b in bs:
        _, h = dash_lib.dash_advantages(
            b["teacher_logps_BxT"],
            b["old_logps_BxT"],
            b["mask_BxT"],
            gamma=d.gamma,
            h_min=d.h_min,
            h_max=d.h_max,
            kappa=d.kappa,
        )
        h = np.asarray(h)[b["mask_BxT"]]
        assert np.ptp(h) > 0  # horizons vary


def _cpo(c, bs, train):
    for b in bs:
        m = b["mask_BxT"]
        d = b["hint_logps_BxT"] - b["old_logps_BxT"]
        lam = np.where(b["correct_B"], c.credit.cpo.lam_correct, c.credit.cpo.lam_wrong)
        want = _grpo(b) + lam[:, None] * np.tanh(d) * m  # τ = 1, β = 1
        np.testing.assert_allclose(b["adv_BxT"], want, rtol=1e-4, atol=1e-5)
        assert _moves(b["adv_BxT"], _grpo(b), m)


def _entropy_shaping(c, bs, train):
    assert any((b["adv_BxT"] - _grpo(b) > 1e-4).any() for b in bs)


def _h2sd(c, bs, train):
    ratios = []
    for b in bs:
        a, m = _grpo(b), b["mask_BxT"]
        on = m & (np.abs(a) > 1e-6) & b["correct_B"][:, None]
        ratios.extend((b["adv_BxT"][on] / a[on]).tolist())
    assert np.ptp(ratios) > 1e-3  # the success modulation m_t moves
    assert any(abs(x["reverse_kl"]) > 0 for x in train if "loss" in x)


def _cliff_noisy(c, bs, train):
    _cliff(c, bs, train)
    assert all(0 < x["first_mistake/moved_frac"] <= 1 for x in train)  # the weak teacher errs


def _rlsd(c, bs, train):
    ratios = []
    for b in bs:
        a, m = _grpo(b), b["mask_BxT"]
        on = m & (np.abs(a) > 1e-6)
        ratios.extend((b["adv_BxT"][on] / a[on]).tolist())
    assert np.ptp(ratios) > 1e-3 and min(ratios) > 0  # magnitudes move, signs never flip


def _distribution_kl(c, bs, train):
    assert all(x["reverse_kl"] > 0 for x in train if "loss" in x)  # the student ≠ the teacher
    # The teacher's informativeness is logged every step (item 6), from the same forward.
    signal = "teacher_topk" if "teacher_topk" in c.score.signals else "teacher_hidden"
    for x in train:
        assert 0 <= x[f"{signal}/noise_frac"] <= 1 and 0 <= x[f"{signal}/sign_agree_balanced"] <= 1
    if signal == "teacher_topk":
        assert all(0 < x["teacher_topk/coverage"] <= 1 for x in train)


def _h2sd_full(c, bs, train):
    _h2sd(c, bs, train)
    _distribution_kl(c, bs, train)


def _ttrl(c, bs, train):
    for b in bs:
        want, _ = om_lib.majority_vote_rewards(b["answer_id_B"], b["group_B"], valid_B=b["valid_B"])
        np.testing.assert_array_equal(b["rewards_B"], np.asarray(want))  # the vote, not the verdict
    # An all-wrong group still has a majority answer: its voters get reward 1.
    assert any((b["rewards_B"] > 0)[~b["correct_B"]].any() for b in bs)
    assert all(0 <= x["ttrl/label_accuracy"] <= 1 for x in train)


def _om(c, bs, train):
    for b in bs:
        assert (b["answer_start_B"] >= 0).any()
        for i in np.flatnonzero(b["answer_start_B"] >= 0):
            cols = np.flatnonzero(b["mask_BxT"][i])[b["answer_start_B"][i] : b["answer_end_B"][i]]
            assert (b["adv_BxT"][i, cols] == 0).all()  # no gradient on the answer span
    assert any(_moves(b["adv_BxT"], _grpo(b), b["mask_BxT"]) for b in bs)


def _om_contrast(c, bs, train):
    _om(c, bs, train)
    assert any(b["pair_compared_BxB"].any() for b in bs)


def _gar(c, bs, train):
    beta, varied = c.score.gar.beta, False
    for b in bs:
        r, ok = b["rewards_B"], b["correct_B"] & b["valid_B"]
        assert (r[ok] >= 1).all() and (r[~ok] == 0).all()
        for g in np.unique(b["group_B"]):
            passing = r[ok & (b["group_B"] == g)]
            varied |= passing.size >= 2 and np.ptp(passing) > 0  # the bonus varies in a group
            if passing.size >= 2:  # centred groups: bonus ≤ β·2
                assert passing.max() <= 1 + 2 * beta + 1e-6
        # The reference's GAR: the reward is the advantage as it is.
        np.testing.assert_allclose(b["adv_BxT"], r[:, None] * b["mask_BxT"], atol=1e-6)
    assert varied


def _hl_gauss(c, bs, train):
    for b in bs:
        v = b["old_values_BxT"][b["mask_BxT"]]
        assert (v >= c.critic.v_min).all() and (v <= c.critic.v_max).all()  # bin expectations
        assert np.ptp(v) > 0


DEFINING = {
    "cliff/cliff": _cliff,
    "cliff/cliff_exact": _cliff,
    "cliff/cliff_noisy": _cliff_noisy,
    "h2sd/rlsd": _rlsd,
    "h2sd/h2sd_full": _h2sd_full,
    "opdvr/opd_full_kl": _distribution_kl,
    "opdvr/opd_topk_kl": _distribution_kl,
    "om_grpo/ttrl": _ttrl,
    "gapo/gapo": _gapo,
    "gapo/gapo_gspo": _gapo,
    "opsa/opsa": _opsa,
    "opdvr/opdvr": _opdvr,
    "seq_opd_rl/seq_opd_rl": _teacher_added,
    "saf_opd/saf_opd": _saf,
    "rstg/rstg": _rstg,
    "cue_grpo/cue_grpo": _cue,
    "cscr/cscr": _cscr,
    "dash/dash": _dash,
    "cpo/cpo": _cpo,
    "cpo/entropy_shaping": _entropy_shaping,
    "h2sd/h2sd": _h2sd,
    "om_grpo/om_grpo": _om,
    "om_grpo/om_grpo_contrast": _om_contrast,
    "gar/gar": _gar,
    "hl_gauss/hl_gauss": _hl_gauss,
}


def test_every_method_has_a_defining_check():
    assert sorted(DEFINING) == sorted(METHODS)
    assert SCRIPTED <= set(METHODS) and set(PULSE_OVERRIDES) <= set(METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_has_a_pulse(name, tmp_path, monkeypatch):
    c = load(name, "pulse")
    if name in SCRIPTED:
        _scripted_rollouts(monkeypatch)
        c.rollout.max_new_tokens = 48  # room for a 3–4 step trace
        c.loss.recompute_old_logps = True  # the scripted tokens were not sampled
    else:
        _parity_rewards(monkeypatch)
    for field, value in PULSE_OVERRIDES.get(name, {}).items():
        section, key = field.rsplit(".", 1)
        _get(c, section)[key] = value
    batches = []
    original = trainer_lib.Trainer.credit

    def keep_batch(self, batch, step, num_groups):
        b = original(self, batch, step, num_groups)
        batches.append({k: np.asarray(b[k]) for k in b.names()})
        return b

    monkeypatch.setattr(trainer_lib.Trainer, "credit", keep_batch)
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
    for b in batches:
        for k in ("mask_BxT", "correct_B", "valid_B"):
            b[k] = b[k].astype(bool)
    DEFINING[name](c, batches, train)
