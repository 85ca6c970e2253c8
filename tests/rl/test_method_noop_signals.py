"""Silent no-op guards for every registered score signal: signal → its method, vs GRPO.

Each signal runs on constructed rollouts and feeds the credit transform or loss
that reads it; where the method must differ from GRPO it does, by an amount
computed by hand from the signal's documented output, and where it must reduce
to GRPO (no mistake located, one cue cluster, a context without privileged
information, β = 0, ...) it does: to 1e-6 for the task-read signals, to 2e-5
for the model ones (the privileged-context rows are scored in another padding
layout, which moves float32 attention sums by ~1e-6 per logit).
"""

from __future__ import annotations

import dataclasses
import types

import jax.numpy as jnp
import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the signals)
from rlvr_jax import tasks
from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.rl.methods import model_signals as ms
from rlvr_jax.rl.methods import teacher_dists as td
from rlvr_jax.tasks import arithmetic
from rlvr_jax.train import warmstart

from .test_model_signals import _context as model_context
from .test_model_signals import _groups as model_groups
from .test_model_signals import _model as context_model
from .test_task_signals import CHARS, GOOD1, P1, _compute, _problem
from .test_task_signals import _groups as task_groups

TOL = dict(rtol=1e-6, atol=1e-6)
MODEL_TOL = dict(rtol=0, atol=2e-5)
ARITH = arithmetic.ArithmeticTask()
HINT_TPL = "{prompt}\n{hint}"


def _grpo(rewards, group, valid, mask):
    entry = credit.ESTIMATORS.get("grpo")
    adv, _ = entry.fn(
        np.asarray(rewards, np.float32),
        np.asarray(group, np.int32),
        np.asarray(valid, bool),
        mask,
        num_groups=int(np.max(group)) + 1,
        values_BxT=None,
        **entry.defaults,
    )
    return np.asarray(adv)


def _apply(name, adv, fields, **hp):
    params = {name: {**credit.TRANSFORMS.get(name).defaults, **hp}}
    return np.asarray(credit.apply_transforms([name], adv, fields, params))


def _task_case(names, responses, group, problems, rewards=None, **options):
    """(signal fields, batch fields, GRPO advantages) of hand-written responses."""
    g = task_groups(CHARS, ARITH, problems, responses, group)
    if rewards is not None:
        g.rewards = np.asarray(rewards, np.float32)
        g.correct = g.rewards > 0
    full = _compute(names, ARITH, CHARS, g, **options)
    mask = g.response_mask & g.valid[:, None]
    provided = [f for n in names.split(",") for f in signals.provides(n.strip())]
    out = {f: full[f] for f in provided}
    fields = {f: full[f] for f in full.names()}
    fields.update({"rewards_B": g.rewards, "mask_BxT": mask, **out})
    return out, fields, _grpo(g.rewards, g.group, g.valid, mask)


# ------------------------------------------------------------------ task-read signals
BAD_LINE2 = "7 + 5 = 12\n12 * 3 = 35\nAnswer: 31"  # first mistake at response token 11
BAD_LINE1 = "7 + 5 = 13\n13 * 3 = 39\nAnswer: 35"  # at token 0


def first_mistake_differs():
    # Row 1's first 11 tokens (the correct line "7 + 5 = 12\n") flip from −|A| to +|A|.
    out, f, a = _task_case(
        "first_mistake", [GOOD1, BAD_LINE2, GOOD1, BAD_LINE1], [0] * 4, [_problem(P1)]
    )
    np.testing.assert_array_equal(out["first_mistake_B"], [-1, 11, -1, 0])
    got = _apply("cliff", a, f)
    cols = np.flatnonzero(f["mask_BxT"][1])  # row 1's response columns
    head, tail = cols[:11], cols[11:]
    assert (a[1, cols] < 0).all()
    np.testing.assert_allclose(got[1, head] - a[1, head], -2 * a[1, head], **TOL)
    np.testing.assert_allclose(got[1, tail], a[1, tail], **TOL)
    others = [0, 2, 3]  # correct rows, and row 3 (mistake at 0: all of it stays negative)
    np.testing.assert_allclose(got[others], a[others], **TOL)


def first_mistake_reduces():
    # Correct rollouts get −1 (no mistake) and keep A_i exactly: with every wrong row's
    # mistake at token 0, Cliff is GRPO.
    out, f, a = _task_case(
        "first_mistake", [GOOD1, BAD_LINE1, GOOD1, BAD_LINE1], [0] * 4, [_problem(P1)]
    )
    np.testing.assert_array_equal(out["first_mistake_B"], [-1, 0, -1, 0])
    np.testing.assert_allclose(_apply("cliff", a, f), a, **TOL)


def majority_vote_differs():
    # Answers (31, 31, 32, 35), verdicts (0, 0, 1, 0): TTRL rewards the majority 31,
    # (1, 1, 0, 0), so GRPO on them gives ±0.5/(√(1/3) + ε) where the verifier's
    # rewards would give (−.5, −.5, 1.5, −.5).
    responses = [BAD_LINE2, BAD_LINE2, GOOD1, BAD_LINE1]
    out, f, a = _task_case("answers,majority_vote", responses, [0] * 4, [_problem(P1)])
    np.testing.assert_array_equal(out["rewards_B"], [1, 1, 0, 0])
    got = _grpo(out["rewards_B"], [0] * 4, [True] * 4, f["mask_BxT"])
    a0 = 0.5 / (np.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(got, np.array([a0, a0, -a0, -a0])[:, None] * f["mask_BxT"], **TOL)
    assert np.abs(got - a).max() > 1


def majority_vote_reduces():
    # The majority answer is the right one and every wrong answer differs from it:
    # the majority's rewards are the verifier's, GRPO exactly.
    responses = [GOOD1, GOOD1, GOOD1, BAD_LINE2]
    out, f, a = _task_case("answers,majority_vote", responses, [0] * 4, [_problem(P1)])
    np.testing.assert_array_equal(out["rewards_B"], [1, 1, 1, 0])
    got = _grpo(out["rewards_B"], [0] * 4, [True] * 4, f["mask_BxT"])
    np.testing.assert_allclose(got, a, **TOL)


P2 = "(7 + 5) * (3 + 4)"
LEFT = "7 + 5 = 12\n3 + 4 = 7\n12 * 7 = 84\nAnswer: 84"
RIGHT = "3 + 4 = 7\n7 + 5 = 12\n12 * 7 = 84\nAnswer: 84"
WRONG = "3 + 4 = 7\n7 + 5 = 12\n12 * 7 = 83\nAnswer: 83"


def cue_differs():
    # Correct rows LEFT, RIGHT, LEFT (cues 0, 1, 0): sizes 2, 1, 2, w = (.5, 1, .5), the
    # positive mass 3a kept: scales (.75, 1.5, .75); the wrong row keeps its A.
    out, f, a = _task_case("cue", [LEFT, RIGHT, LEFT, WRONG], [0] * 4, [_problem(P2)])
    np.testing.assert_array_equal(out["cue_B"][:3], [0, 1, 0])
    got = _apply("cue_grpo", a, f)
    np.testing.assert_allclose(got[:3], a[:3] * np.array([0.75, 1.5, 0.75])[:, None], rtol=1e-5)
    np.testing.assert_allclose(got[3], a[3], **TOL)


def cue_reduces():
    _, f, a = _task_case("cue", [LEFT, LEFT, LEFT, WRONG], [0] * 4, [_problem(P2)])
    np.testing.assert_allclose(_apply("cue_grpo", a, f), a, **TOL)


def answers_differs():
    # GOOD1's answer "32" is its last two characters before the end-of-turn token: those
    # two tokens lose their advantage, nothing else moves.
    out, f, a = _task_case("answers", [GOOD1, BAD_LINE2], [0, 0], [_problem(P1)])
    n = len(GOOD1)
    np.testing.assert_array_equal(out["answer_start_B"][0], n - 2)
    np.testing.assert_array_equal(out["answer_end_B"][0], n)
    got = _apply("answer_mask", a, f)
    cols = np.flatnonzero(f["mask_BxT"][0])
    want = a.copy()
    want[0, cols[n - 2 : n]] = 0
    want[1, np.flatnonzero(f["mask_BxT"][1])[len(BAD_LINE2) - 2 :][:2]] = 0
    np.testing.assert_allclose(got, want, **TOL)


def answers_reduces():
    # No answer line: no span, the mask is GRPO.
    out, f, a = _task_case(
        "answers", ["12 * 3 = 36", "7 + 5 = 12"], [0, 0], [_problem(P1)], rewards=[1, 0]
    )
    np.testing.assert_array_equal(out["answer_start_B"], [-1, -1])
    np.testing.assert_allclose(_apply("answer_mask", a, f), a, **TOL)


def pair_compare_differs():
    # Answers (32, 32, 31, 35): consensus (.5, .5, .25, .25); rows 0, 1 beat rows 2, 3 and
    # 2, 3 tie: win rates (1, 1, 1/6, 1/6); λ = .5 → r' = (.75, .75, .2083, .2083).
    rs = ["Answer: 32", "Answer: 32", "Answer: 31", "Answer: 35"]
    out, f, _ = _task_case("answers,pair_compare", rs, [0] * 4, [_problem(P1)])
    got = _apply("om_grpo_contrast", None, f, mask_answer=False)
    r = np.array([0.75, 0.75, 0.125 + 0.25 / 3, 0.125 + 0.25 / 3])
    want = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(got, want[:, None] * f["mask_BxT"], rtol=1e-5, atol=1e-6)


def pair_compare_reduces():
    # One answer per group: no pair is compared, r' = consensus: OM-GRPO exactly.
    rs = ["Answer: 32", "Answer: 32", "Answer: 9", "Answer: 9"]
    out, f, _ = _task_case("answers,pair_compare", rs, [0, 0, 1, 1], [_problem(P1)] * 2)
    assert not out["pair_compared_BxB"].any()
    np.testing.assert_allclose(
        _apply("om_grpo_contrast", None, f), _apply("om_grpo", None, f), **TOL
    )


def branches_differs():
    # Group 0: "12 + 1" / "12 - 1" share "12 " (node at 3, rewards 1, 0: CBV .5); group 1:
    # "5 5" / "5 6" share "5 " (node at 2, rewards 1, 1: CBV 0), "7" / "7 8" share "7"
    # (node at 1, rewards 1, 0: CBV .5). Mean CBV 1/3: factors 1.5, .1 (clipped), 1.5 on
    # each node's continuation; a later row's shared prefix gets 0 (credited once), the
    # first row's the mean advantage of the two rows through it.
    rs = ["12 + 1", "12 - 1", "9", "8", "5 5", "5 6", "7", "7 8"]
    rewards = [1, 0, 1, 0, 1, 1, 1, 0]
    out, f, a = _task_case("branches", rs, [0] * 4 + [1] * 4, [_problem(P1)] * 2, rewards)
    got = _apply("cbpo", a, f)
    want = a.copy()
    cols = [np.flatnonzero(m) for m in f["mask_BxT"]]
    for row, pos, factor in [
        (0, 3, 1.5),
        (1, 3, 1.5),
        (4, 2, 0.1),
        (5, 2, 0.1),
        (6, 1, 1.5),
        (7, 1, 1.5),
    ]:
        want[row, cols[row][pos:]] *= factor
    for row, start in [(1, 3), (5, 2), (7, 1)]:
        want[row, cols[row][:start]] = 0
        mean = (a[row - 1, cols[row - 1][0]] + a[row, cols[row][0]]) / 2
        want[row - 1, cols[row - 1][:start]] = mean
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(want[0, cols[0][:3]], a[0, cols[0][:3]])  # (A − A) / 2 = 0


def branches_reduces():
    # No two responses of a group share a first token: no node, CBPO is GRPO.
    rs = ["12 + 1", "9 - 1", "3", "8"]
    out, f, a = _task_case("branches", rs, [0] * 4, [_problem(P1)], [1, 0, 1, 0])
    assert (out["branch_pos_K"] < 0).all() and (out["branch_start_B"] == 0).all()
    np.testing.assert_allclose(_apply("cbpo", a, f), a, **TOL)


# Language reward ("GRPO Beyond English"): r + w·1[detected language = target].
def _language_case(weight, responses):
    ml = tasks.get("multilingual_arithmetic", language="en")
    g = task_groups(CHARS, ml, [ml.problem(0, "train")], responses, [0, 0])
    out = _compute("language", ml, CHARS, g, language__weight=weight, language__language="")
    mask = g.response_mask & g.valid[:, None]
    return g, out["rewards_B"], _grpo(g.rewards, g.group, g.valid, mask), mask


EN = "17 times 7 is 119\n15 minus 8 is 7\n119 minus 7 is 112\nAnswer: 112"
FR = "17 fois 7 égale 119\n15 moins 8 égale 7\n119 moins 7 égale 112\nAnswer: 112"  # French steps


def language_differs():
    # Both rows answer correctly (GRPO: 0); only the English one reasons in the prompt's
    # language, so with w = 0.5 the rewards are (1.5, 1.0) and GRPO gives ±1/√2.
    g, rewards, a, mask = _language_case(0.5, [EN, FR])
    assert g.correct.all() and np.abs(a).max() == 0
    np.testing.assert_allclose(rewards, [1.5, 1.0], **TOL)
    adv = _grpo(rewards, g.group, g.valid, mask)
    per_row = (adv * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(per_row, [2**-0.5, -(2**-0.5)], atol=1e-5)


def language_reduces():
    # w = 0: the verifier's rewards unchanged, so the advantages equal GRPO's.
    g, rewards, a, mask = _language_case(0.0, [EN, FR])
    np.testing.assert_allclose(rewards, g.rewards, **TOL)
    np.testing.assert_allclose(_grpo(rewards, g.group, g.valid, mask), a, **TOL)


# ----------------------------------------------------------------------- model signals
@pytest.fixture(scope="module")
def model_case():
    """A tiny random policy on arithmetic, rollouts by hand, the trainer-scored batch."""
    tokenizer = warmstart.default_tokenizer()
    task = tasks.get("arithmetic", **warmstart.TASK_OPTIONS["arithmetic"])
    ctx = model_context(tokenizer, task)
    g = model_groups(tokenizer, task, np.random.default_rng(0))
    g.behaviour_logps = ctx.policy.logps(g.tokens, g.attention_mask)
    g.rewards = g.correct.astype(np.float32)
    mask = g.response_mask & g.valid[:, None]
    b = {
        "tokens_BxT": g.tokens,
        "attention_mask_BxT": g.attention_mask,
        "mask_BxT": mask,
        "behaviour_logps_BxT": g.behaviour_logps,
        "old_logps_BxT": np.where(mask, g.behaviour_logps, 0.0).astype(np.float32),
        "entropy_BxT": np.zeros(mask.shape, np.float32),
        "rewards_B": g.rewards,
        "correct_B": g.correct,
        "group_B": g.group,
        "valid_B": g.valid,
    }
    a = _grpo(g.rewards, g.group, g.valid, mask)
    return ctx, g, b, a


def _no_hint(ctx):
    """The context with a task whose hint is empty: "{prompt}{hint}" is the plain prompt."""
    task = types.SimpleNamespace(name="arithmetic", hint=lambda p: "")
    return dataclasses.replace(ctx, task=task, cache={}, step_cache={})


def hint_differs(model_case):
    # CPO's term is λ·tanh(ℓ^G − ℓ^S): the hinted view moves it off 0 on the policy itself.
    ctx, g, b, a = model_case
    out = ms.hint(ctx, g, b, template=HINT_TPL, correct_template="")
    got = _apply("cpo", a, {**b, **out})
    d = out["hint_logps_BxT"] - b["old_logps_BxT"]
    np.testing.assert_allclose(got - a, 0.1 * np.tanh(d) * b["mask_BxT"], rtol=1e-5, atol=1e-6)
    assert np.abs(got - a).max() > 1e-3


def hint_reduces(model_case):
    ctx, g, b, a = model_case
    out = ms.hint(_no_hint(ctx), g, b, template="{prompt}{hint}", correct_template="")
    np.testing.assert_allclose(out["hint_logps_BxT"], b["old_logps_BxT"], **MODEL_TOL)
    np.testing.assert_allclose(_apply("cpo", a, {**b, **out}), a, **MODEL_TOL)


def _teacher(ctx, g, b, template):
    kw = dict(source="hint", domain="", role="teacher", path="", template=template)
    return ms.teacher(ctx, g, b, **kw)


def teacher_differs(model_case):
    # The weighted-additive OPD baseline adds w·(ℓ^T − ℓ^S) with the self-teacher's ℓ^T.
    ctx, g, b, a = model_case
    out = _teacher(ctx, g, b, HINT_TPL)
    got = _apply("opd_additive", a, {**b, **out}, weight=0.5)
    d = out["teacher_logps_BxT"] - b["old_logps_BxT"]
    np.testing.assert_allclose(got - a, 0.5 * d * b["mask_BxT"], rtol=1e-5, atol=1e-6)
    assert np.abs(d).max() > 1e-3


def teacher_reduces(model_case):
    ctx, g, b, a = model_case
    out = _teacher(_no_hint(ctx), g, b, "{prompt}{hint}")
    np.testing.assert_allclose(_apply("opd_additive", a, {**b, **out}), a, **MODEL_TOL)


def cscr_shift_differs(model_case):
    # Weights w_t ∝ (1 + s_t)^−1, s_t = ½(|Δ⁺| + |Δ⁻|), renormalised to Σ_t w_t = n_i.
    ctx, g, b, a = model_case
    opts = signals.SIGNALS.get("cscr_shift").defaults
    out = ms.cscr_shift(ctx, g, b, **opts)
    got = _apply("cscr", a, {**b, **out})
    m = b["mask_BxT"]
    s = 0.5 * (np.abs(out["cf_shift_correct_BxT"]) + np.abs(out["cf_shift_incorrect_BxT"]))
    w = np.where(m, 1.0 / (1.0 + s), 0)
    w = w * m.sum(1, keepdims=True) / np.maximum(w.sum(1, keepdims=True), 1e-30)
    np.testing.assert_allclose(got, w * a, rtol=1e-5, atol=1e-6)
    rows = np.abs(a).max(1) > 0
    assert np.abs(w[rows][m[rows]] - 1).max() > 1e-3


def cscr_shift_reduces(model_case):
    ctx, g, b, a = model_case
    out = ms.cscr_shift(ctx, g, b, correct_template="{prompt}", incorrect_template="{prompt}")
    np.testing.assert_allclose(out["cf_shift_correct_BxT"], 0, **MODEL_TOL)
    np.testing.assert_allclose(_apply("cscr", a, {**b, **out}), a, rtol=1e-4, atol=2e-5)


def group_success_differs():
    # GAPO's clip-rate buckets read each row's group success rate: groups of 4 with
    # 1 and 3 correct rows give 0.25 and 0.75; the padding row gets 0.
    batch = {
        "group_B": np.array([0, 0, 0, 0, 1, 1, 1, 1, 1]),
        "valid_B": np.array([1, 1, 1, 1, 1, 1, 1, 1, 0], bool),
        "correct_B": np.array([1, 0, 0, 0, 1, 1, 1, 0, 1], bool),
    }
    out = signals.SIGNALS.get("group_success").fn(None, None, batch)
    np.testing.assert_allclose(out["group_success_B"], [0.25] * 4 + [0.75] * 4 + [0.0])


def group_success_reduces():
    # All-correct and all-wrong groups: rates 1 and 0 (GRPO's zero-advantage groups).
    batch = {
        "group_B": np.array([0, 0, 1, 1]),
        "valid_B": np.ones(4, bool),
        "correct_B": np.array([1, 1, 0, 0], bool),
    }
    out = signals.SIGNALS.get("group_success").fn(None, None, batch)
    np.testing.assert_allclose(out["group_success_B"], [1, 1, 0, 0])


def _gar(ctx, g, b, **hp):
    opts = {**signals.SIGNALS.get("gar").defaults, "chunk": 64, **hp}
    return signals.SIGNALS.get("gar").fn(ctx, g, b, **opts)


def gar_differs(model_case):
    # Passing rows get 1 + β·max(0, a − m): here every group has ≤ 1 passing row, so the
    # bonus is β·max(0, cos): ≥ 0, > 0 somewhere, and the rewards of passing rows differ.
    ctx, g, b, _ = model_case
    out = _gar(ctx, g, b, beta=0.5)
    passed = b["correct_B"] & b["valid_B"]
    bonus = out["rewards_B"][passed] - 1.0
    assert (bonus >= 0).all() and (bonus <= 0.5 + 1e-6).all() and bonus.max() > 0
    assert np.ptp(out["rewards_B"][passed]) > 0
    np.testing.assert_array_equal(out["rewards_B"][~passed], b["rewards_B"][~passed])


def gar_reduces(model_case):
    # β = 0: the verifier's reward exactly; the forward's old log-probs are the scorer's.
    ctx, g, b, _ = model_case
    out = _gar(ctx, g, b, beta=0.0)
    np.testing.assert_array_equal(out["rewards_B"], b["rewards_B"])
    np.testing.assert_allclose(out["old_logps_BxT"], b["old_logps_BxT"], rtol=1e-5, atol=1e-5)


# MOPD: the mixture task's two domains, each routed to a pretrained teacher directory.
_MIX_DOMAINS = ("arithmetic", "knights_knaves")


def _mopd(model_case, teacher_for):
    """(fields, batch, GRPO adv) of MOPD on mixture rollouts; teacher_for(domain) -> HF dir."""
    import json
    import tempfile

    from rlvr_jax.models import save_pretrained
    from rlvr_jax.rl.methods import mopd

    ctx, _, _, _ = model_case
    mix = tasks.get(
        "mixture",
        domains=_MIX_DOMAINS,
        domain_options={d: warmstart.TASK_OPTIONS[d] for d in _MIX_DOMAINS},
    )
    g = model_groups(ctx.tokenizer, mix, np.random.default_rng(3), prompts=6, g=2)
    assert {mix.domain_of(p) for p in g.problems} == set(_MIX_DOMAINS)
    g.behaviour_logps = ctx.policy.logps(g.tokens, g.attention_mask)
    g.rewards = (np.arange(len(g.group)) % 2).astype(np.float32)  # one right, one wrong
    g.correct = g.rewards > 0
    mask = g.response_mask & g.valid[:, None]
    b = dict(
        tokens_BxT=g.tokens,
        attention_mask_BxT=g.attention_mask,
        mask_BxT=mask,
        old_logps_BxT=np.where(mask, g.behaviour_logps, 0.0).astype(np.float32),
        rewards_B=g.rewards,
        correct_B=g.correct,
        group_B=g.group,
        valid_B=g.valid,
    )
    root = tempfile.mkdtemp(prefix="mopd_noop_")
    spec = {}
    for d in _MIX_DOMAINS:
        model = teacher_for(d)
        save_pretrained(model, model.config, f"{root}/{d}")
        warmstart.save_tokenizer(ctx.tokenizer, f"{root}/{d}")
        spec[d] = {"path": f"{root}/{d}"}
    fresh = dataclasses.replace(ctx, cache={}, step_cache={})
    out = mopd.mopd(fresh, g, b, teachers=json.dumps(spec), domain_key="domain", diagnostics=False)
    return out, b, _grpo(g.rewards, g.group, g.valid, mask)


def mopd_differs(model_case):
    # Routed to two other random teachers, opd_additive adds w·(ℓ^T − ℓ^S) per token.
    from rlvr_jax.models import init_model

    cfg = model_case[0].policy.config
    out, b, a = _mopd(model_case, lambda d: init_model(cfg, seed=7 + len(d)))
    got = _apply("opd_additive", a, {**b, **out}, weight=0.5)
    d = out["teacher_logps_BxT"] - b["old_logps_BxT"]
    np.testing.assert_allclose(got - a, 0.5 * d * b["mask_BxT"], rtol=1e-5, atol=1e-6)
    assert np.abs(d).max() > 1e-2


def mopd_reduces(model_case):
    # Every domain's teacher is the policy itself: ℓ^T = ℓ^S, so MOPD's OPD term vanishes.
    policy = context_model(model_case[0])
    out, b, a = _mopd(model_case, lambda d: policy)
    np.testing.assert_allclose(out["teacher_logps_BxT"], b["old_logps_BxT"], **MODEL_TOL)
    np.testing.assert_allclose(_apply("opd_additive", a, {**b, **out}), a, **MODEL_TOL)


def _student_states(ctx, b, topk=0):
    """The policy's own next-token states on the plain rows (`teacher_dists.make_state_fn`)."""
    p = ctx.policy
    fn = td.make_state_fn(p.graphdef, topk=topk)
    states = np.asarray(fn(p.params, p.rest, b["tokens_BxT"], b["attention_mask_BxT"]))
    return td.split_states(states)[0]


def _kl_loss(name, b, a, fields, **hp):
    """Per-token loss `name` at θ = θ_old (ratio 1: its PPO part is −A)."""
    entry = objectives.POLICY_LOSSES.get(name)
    old = jnp.asarray(b["old_logps_BxT"])
    hp = {**entry.defaults, **hp}
    out, _ = entry.fn(old, old, jnp.asarray(a), b["mask_BxT"], mb=fields, **hp)
    return np.asarray(out)


def _vocab_mb(ctx, b, out):
    kernel = np.asarray(context_model(ctx).output_kernel(), np.float32)
    return dict(
        out,
        hidden_BxTxD=_student_states(ctx, b),
        output_kernel_DxV=kernel,
        teacher_kernel_DxV=kernel,  # a self-teacher: the policy's own kernel
        correct_B=b["correct_B"],
    )


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def teacher_hidden_differs(model_case):
    # Self-teacher on the hinted view: opd_full_kl (rl_coef = 1) is PPO (−A at θ_old)
    # plus the full-vocabulary KL of the policy's plain vs hinted next-token
    # distributions (NumPy softmax over the vocabulary), > 0 on the response tokens.
    ctx, g, b, a = model_case
    out = td.teacher_hidden(ctx, g, b, **{**_TD_OPTS, "template": HINT_TPL})
    mb = _vocab_mb(ctx, b, out)
    w = mb["output_kernel_DxV"]
    ls = _np_log_softmax(mb["hidden_BxTxD"] @ w)
    lt = _np_log_softmax(out["teacher_hidden_BxTxD"] @ w)
    m = b["mask_BxT"]
    kl = np.where(m, (np.exp(ls) * (ls - lt)).sum(-1), 0)
    got = _kl_loss("opd_full_kl", b, a, mb, rl_coef=1.0)
    np.testing.assert_allclose(got - (-a * m), kl, rtol=1e-4, atol=2e-5)
    assert kl[m].max() > 1e-3


def teacher_hidden_reduces(model_case):
    # No privileged information in the view: the teacher's states are the student's,
    # KL = 0, and opd_full_kl (rl_coef = 1) is PPO clip.
    ctx, g, b, a = model_case
    out = td.teacher_hidden(_no_hint(ctx), g, b, **{**_TD_OPTS, "template": "{prompt}{hint}"})
    mb = _vocab_mb(ctx, b, out)
    m = b["mask_BxT"][..., None]
    np.testing.assert_allclose(
        out["teacher_hidden_BxTxD"], np.where(m, mb["hidden_BxTxD"], 0), rtol=0, atol=1e-4
    )
    got = _kl_loss("opd_full_kl", b, a, mb, rl_coef=1.0)
    np.testing.assert_allclose(got, -a * b["mask_BxT"], **MODEL_TOL)


def teacher_topk_differs(model_case):
    # k = 4 tokens of the hinted view; opd_topk_kl (rl_coef = 0) is the KL of the plain
    # and hinted distributions renormalised on those 4 tokens (NumPy).
    ctx, g, b, a = model_case
    out = td.teacher_topk(ctx, g, b, k=4, **{**_TD_OPTS, "template": HINT_TPL})
    mb = _vocab_mb(ctx, b, out)
    ids = out["teacher_topk_ids_BxTxK"]
    ls = _np_log_softmax(mb["hidden_BxTxD"] @ mb["output_kernel_DxV"])
    ls = _np_log_softmax(np.take_along_axis(ls, ids, -1))
    lt = _np_log_softmax(out["teacher_topk_logps_BxTxK"])
    m = b["mask_BxT"]
    kl = np.where(m, (np.exp(ls) * (ls - lt)).sum(-1), 0)
    np.testing.assert_allclose(_kl_loss("opd_topk_kl", b, a, mb), kl, rtol=1e-4, atol=2e-5)
    assert kl[m].max() > 1e-3


def teacher_topk_reduces(model_case):
    # The plain view: the teacher's top-k are the student's own, KL = 0, PPO clip.
    ctx, g, b, a = model_case
    out = td.teacher_topk(_no_hint(ctx), g, b, k=4, **{**_TD_OPTS, "template": "{prompt}{hint}"})
    got = _kl_loss("opd_topk_kl", b, a, _vocab_mb(ctx, b, out), rl_coef=1.0)
    np.testing.assert_allclose(got, -a * b["mask_BxT"], **MODEL_TOL)


_TD_OPTS = dict(source="hint", domain="", role="teacher", path="", diagnostics=False)


def _tree_case(parent, pos, rewards, lengths):
    """A branched group (ids 0..n−1; each row's response is its path after its branch point)."""
    n = len(parent)
    own = np.asarray(lengths) - np.asarray(pos)
    mask = np.arange(max(lengths))[None, :] < own[:, None]
    b = {
        "group_B": np.zeros(n, np.int32),
        "valid_B": np.ones(n, bool),
        "branch_id_B": np.arange(n, dtype=np.int32),
        "branch_parent_B": np.asarray(parent, np.int32),
        "branch_pos_B": np.asarray(pos, np.int32),
    }
    out = signals.SIGNALS.get("branch_tree").fn(None, None, b)
    b.update(out, rewards_B=np.asarray(rewards, np.float32), mask_BxT=mask)
    return out, b, _grpo(rewards, b["group_B"], b["valid_B"], mask)


def branch_tree_differs():
    # Root 0 (reward 1) with branches 2, 3 at 2 (rewards 0, 0): node CBV √2/3; root 1
    # (reward 0) with branches 4, 5 at 1 (1, 0): CBV .5. Mean .486: factors .970, 1.03.
    # Root 0's tokens 0, 1 are on rows 0, 2, 3: credited once, with their mean advantage.
    rewards = [1.0, 0, 0, 0, 1, 0]
    out, b, a = _tree_case([-1, -1, 0, 0, 1, 1], [0, 0, 2, 2, 1, 1], rewards, [5] * 6)
    got = _apply("cbpo", a, b)
    cbv = np.array([np.std([1, 0, 0]), np.std([0, 1, 0])])
    f = np.clip(cbv / (cbv.mean() + 1e-6), 0.1, 3.0)
    k = int(np.flatnonzero(out["branch_pos_K"] == 2)[0])
    f = f if k == 0 else f[::-1]
    want = np.zeros_like(a)
    want[0, :2] = a[[0, 2, 3], 0].mean()
    want[0, 2:] = f[0] * a[0, 2:]
    want[2:4, :3] = f[0] * a[2:4, :3]
    want[1, :1] = a[[1, 4, 5], 0].mean()
    want[1, 1:] = f[1] * a[1, 1:]
    want[4:6, :4] = f[1] * a[4:6, :4]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert abs(want[0, 0] - a[0, 0]) > 0.1 and (np.sign(got[2:4, :3]) == np.sign(a[2:4, :3])).all()


def branch_tree_reduces():
    # Only roots (no branch): no node, nothing shared: CBPO is GRPO. A node whose parent and
    # branches all agree, the only node: factor 1, and it shares nothing before it (pos 0 is
    # never a branch point, but a branch at 1 shares token 0: rows agree, mean = A).
    _, b, a = _tree_case([-1] * 4, [0] * 4, [1.0, 0, 1, 0], [4, 3, 5, 2])
    np.testing.assert_allclose(_apply("cbpo", a, b), a, **TOL)
    _, b, a = _tree_case([-1, -1, 0, 0], [0, 0, 1, 1], [1.0, 0, 1, 1], [4, 4, 4, 4])
    want = a.copy()
    want[0, :1] = a[[0, 2, 3], 0].mean()
    np.testing.assert_allclose(_apply("cbpo", a, b), want, **TOL)
    np.testing.assert_allclose(want[0], a[0], **TOL)  # equal advantages: the mean is A


def _guided(model_case, text):
    """The model case with every row of group 0 guided by `text` (GRSD's guidance ids)."""
    from rlvr_jax.rollout.reflective import GUIDANCE_FIELD

    ctx, g, b, a = model_case
    ids = np.full((len(g.group), 16), -1, np.int32)
    tok = ctx.tokenizer.encode(text)[:16] if text else []
    ids[g.group == 0, : len(tok)] = tok
    return ctx, g, {**b, GUIDANCE_FIELD: ids}, a


def guidance_differs(model_case):
    # GRSD: the guided view moves ℓ^T on group 0's rows only; the grsd weights follow it.
    ctx, g, b, a = _guided(model_case, "Multiply first, then add.")
    out = signals.SIGNALS.get("guidance").fn(ctx, g, b, template="{prompt}\nGuidance: {guidance}")
    d = out["guidance_logps_BxT"] - b["old_logps_BxT"]
    assert np.abs(d[g.group == 0]).max() > 1e-3 and (d[g.group != 0] == 0).all()
    got = _apply("grsd", a, {**b, **out})
    m = b["mask_BxT"] & (a != 0)
    assert np.abs(got[m] / a[m] - 1).max() > 1e-3 and (np.sign(got[m]) == np.sign(a[m])).all()


def guidance_reduces(model_case):
    # No guidance at all: ℓ^T = ℓ^S exactly, GRSD is GRPO; a template that drops the
    # guidance scores the plain view (ℓ^S up to the re-layout's float noise).
    ctx, g, b, a = _guided(model_case, "")
    out = signals.SIGNALS.get("guidance").fn(ctx, g, b, template="{prompt}\nGuidance: {guidance}")
    np.testing.assert_array_equal(out["guidance_logps_BxT"], b["old_logps_BxT"])
    np.testing.assert_allclose(_apply("grsd", a, {**b, **out}), a, **TOL)
    ctx, g, b, a = _guided(model_case, "Multiply first, then add.")
    out = signals.SIGNALS.get("guidance").fn(ctx, g, b, template="{prompt}")
    np.testing.assert_allclose(out["guidance_logps_BxT"], b["old_logps_BxT"], **MODEL_TOL)


SIGNAL_CASES = {
    "answers": (answers_differs, answers_reduces),
    "branch_tree": (branch_tree_differs, branch_tree_reduces),
    "branches": (branches_differs, branches_reduces),
    "cscr_shift": (cscr_shift_differs, cscr_shift_reduces),
    "cue": (cue_differs, cue_reduces),
    "first_mistake": (first_mistake_differs, first_mistake_reduces),
    "gar": (gar_differs, gar_reduces),
    "guidance": (guidance_differs, guidance_reduces),
    "group_success": (group_success_differs, group_success_reduces),
    "hint": (hint_differs, hint_reduces),
    "language": (language_differs, language_reduces),
    "majority_vote": (majority_vote_differs, majority_vote_reduces),
    "mopd": (mopd_differs, mopd_reduces),
    "pair_compare": (pair_compare_differs, pair_compare_reduces),
    "teacher": (teacher_differs, teacher_reduces),
    "teacher_hidden": (teacher_hidden_differs, teacher_hidden_reduces),
    "teacher_topk": (teacher_topk_differs, teacher_topk_reduces),
}
TASK_SIGNALS = (
    "answers",
    "branch_tree",
    "branches",
    "cue",
    "first_mistake",
    "group_success",
    "language",
    "majority_vote",
    "pair_compare",
)


@pytest.mark.parametrize("name", TASK_SIGNALS)
@pytest.mark.parametrize("case", ["differs", "reduces"])
def test_task_signal(name, case):
    SIGNAL_CASES[name][case == "reduces"]()


@pytest.mark.parametrize("name", sorted(set(SIGNAL_CASES) - set(TASK_SIGNALS)))
@pytest.mark.parametrize("case", ["differs", "reduces"])
def test_model_signal(name, case, model_case):
    SIGNAL_CASES[name][case == "reduces"](model_case)
