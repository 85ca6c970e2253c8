"""Silent no-op guards: every registered credit transform and policy loss, through its registry.

For each method, two cases on one constructed batch (2 groups of 4 rows, GRPO
advantages as the input):
  * where its paper says it must differ from GRPO, it does, by a hand-computed
    amount (not merely "≠");
  * where it must reduce to GRPO (or to its named special case: CPO with an
    external teacher is OPD, GAPO with equal |A| is PPO clip at ε0, ...), it
    does, to 1e-6.
A method added to a registry without a case here fails
`test_every_registered_method_has_both_cases`. The score signals' cases are in
tests/rl/test_method_noop_signals.py.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the methods)
from rlvr_jax.rl import credit, objectives

TOL = dict(rtol=1e-6, atol=1e-6)
B, T = 8, 5
LENGTHS = [5, 4, 3, 5, 2, 5, 4, 3]
GROUP = np.repeat([0, 1], 4).astype(np.int32)
CORRECT = np.array([1, 0, 1, 0, 1, 1, 1, 0], bool)
# GRPO (Bessel std, ε = 1e-6): group 0 = [1, 0, 1, 0] → ±0.5/(√(1/3) + ε); group 1 =
# [1, 1, 1, 0] → mean .75, std .5 → [.25, .25, .25, −.75]/(.5 + ε) ≈ [.5, .5, .5, −1.5].
A0 = 0.5 / (math.sqrt(1 / 3) + 1e-6)
A1 = 0.25 / (0.5 + 1e-6)
A_ROWS = np.array([A0, -A0, A0, -A0, A1, A1, A1, -3 * A1])


def _mask():
    m = np.zeros((B, T), bool)
    for i, n in enumerate(LENGTHS):
        m[i, :n] = True
    return m


MASK = _mask()


def make_batch(**fields):
    """The standard batch fields, plus method fields (all host NumPy)."""
    rng = np.random.default_rng(0)
    old = np.where(MASK, rng.normal(-1.5, 0.5, (B, T)), 0).astype(np.float32)
    b = {
        "tokens_BxT": rng.integers(3, 50, (B, T)).astype(np.int32),
        "attention_mask_BxT": MASK.copy(),
        "mask_BxT": MASK.copy(),
        "old_logps_BxT": old,
        "entropy_BxT": np.where(MASK, rng.uniform(0.5, 2.0, (B, T)), 0).astype(np.float32),
        "rewards_B": CORRECT.astype(np.float32),
        "correct_B": CORRECT.copy(),
        "group_B": GROUP.copy(),
        "valid_B": np.ones(B, bool),
    }
    b.update(fields)
    return b


def grpo(b):
    entry = credit.ESTIMATORS.get("grpo")
    adv, _ = entry.fn(
        b["rewards_B"],
        b["group_B"],
        b["valid_B"],
        b["mask_BxT"],
        num_groups=2,
        values_BxT=None,
        **entry.defaults,
    )
    return np.asarray(adv)


def transform(name, b, step=0, **hp):
    """(GRPO advantages A, the transform's output at RL step `step`) on batch b."""
    a = grpo(b)
    np.testing.assert_allclose(a, A_ROWS[:, None] * b["mask_BxT"], rtol=1e-5, atol=1e-6)
    params = {name: {**credit.TRANSFORMS.get(name).defaults, **hp}}
    return a, np.asarray(credit.apply_transforms([name], a, b, params, step=step))


def with_d(d_BxT, key="teacher_logps_BxT", **fields):
    """A batch whose teacher-like field is old_logps + d (so ℓ^T − ℓ^S = d on the mask)."""
    b = make_batch(**fields)
    b[key] = np.where(MASK, b["old_logps_BxT"] + d_BxT, 0).astype(np.float32)
    return b


def _d(seed=1, scale=0.5):
    return np.where(MASK, np.random.default_rng(seed).normal(0, scale, (B, T)), 0)


# ============================================================================ transforms
# Each entry: (differ test, reduce test). A case returns nothing; it asserts.


def cliff_differs():
    # Row 1 (wrong, A = −A0) with its first mistake at response token 2: tokens 0, 1 get
    # +|A| (a change of +2·A0), tokens 2.. keep −|A| = A.
    b = make_batch(first_mistake_B=np.array([-1, 2, -1, -1, -1, -1, -1, -1]))
    a, out = transform("cliff", b)
    want = a.copy()
    want[1, :2] = A0
    np.testing.assert_allclose(out, want, **TOL)
    np.testing.assert_allclose(out[1, :2] - a[1, :2], 2 * A0, rtol=1e-6)


def cliff_reduces():
    # A first mistake on a correct row is ignored (Cliff keeps A_i on correct rows), and
    # −1 (none located) keeps A_i: GRPO exactly.
    b = make_batch(first_mistake_B=np.array([1, -1, 3, -1, 0, 2, 1, -1]))
    a, out = transform("cliff", b)
    np.testing.assert_allclose(out, a, **TOL)


def cue_differs():
    # Group 1's correct rows 4, 5, 6 (A = .5 each, mass 1.5) have cues 5, 5, 7: cluster
    # sizes 2, 2, 1, w = 1/2, 1/2, 1, s_i = w_i·1.5/(.5·2) → .375, .375, .75; row 7 keeps −1.5.
    b = make_batch(cue_B=np.array([1, 2, 1, 3, 5, 5, 7, 9]))
    a, out = transform("cue_grpo", b)
    want = a.copy()
    want[4:7] *= np.array([0.75, 0.75, 1.5])[:, None]
    np.testing.assert_allclose(out[4:], want[4:], **TOL)
    np.testing.assert_allclose(
        out[4:7].sum(1) / MASK[4:7].sum(1), np.array([0.75, 0.75, 1.5]) * A1, rtol=1e-6
    )


def cue_reduces():
    # One cluster per group: every weight is equal, so Cue-GRPO is GRPO.
    b = make_batch(cue_B=np.array([1, 2, 1, 3, 5, 5, 5, 9]))
    a, out = transform("cue_grpo", b)
    np.testing.assert_allclose(out, a, **TOL)


def dash_differs():
    # Fixed horizon 2 (h_min = h_max = 2), γ = .5: a_t = d_t + .5·d_{t+1} (last token: d_t),
    # replacing A (outcome_coef 0).
    d = _d()
    _, out = transform("dash", with_d(d), h_min=2, h_max=2, gamma=0.5)
    nxt = np.concatenate([d[:, 1:], np.zeros((B, 1))], 1) * MASK
    np.testing.assert_allclose(out, (d + 0.5 * nxt) * MASK, rtol=1e-5, atol=1e-6)


def dash_reduces():
    # Teacher = student (d = 0) with the outcome advantage mixed in at 1: GRPO; and
    # H = 1 gives plain OPSD, a_t = d_t.
    a, out = transform("dash", with_d(np.zeros((B, T))), outcome_coef=1.0)
    np.testing.assert_allclose(out, a, **TOL)
    d = _d()
    _, out = transform("dash", with_d(d), h_min=1, h_max=1)
    np.testing.assert_allclose(out, d * MASK, rtol=1e-5, atol=1e-6)


def _branches(member, pos, start, shared=None):
    return dict(
        branch_member_KxB=np.array(member, bool),
        branch_pos_K=np.array(pos, np.int32),
        branch_start_B=np.array(start, np.int32),
        branch_offset_B=np.zeros(B, np.int32),
        branch_shared_BxB=np.zeros((B, B), np.int32) if shared is None else shared,
    )


def cbpo_differs():
    # Node 0: rows 0, 1 (rewards 1, 0: CBV .5) from token 2; node 1: rows 4, 5 (1, 1: CBV 0)
    # from token 1. Mean CBV .25: factors clip(2) = 2 and clip(0 → .1) = .1. Row 1's
    # shared prefix (tokens 0, 1) is its parent's: credit 0 there; row 0 credits it once
    # with the mean advantage of the rows through it, (A0 − A0) / 2 = 0 (GRPO's net).
    m = np.zeros((2, B), bool)
    m[0, [0, 1]] = True
    m[1, [4, 5]] = True
    shared = np.zeros((B, B), np.int32)
    shared[0, 1] = shared[1, 0] = 2
    shared[4, 5] = shared[5, 4] = 1
    b = make_batch(**_branches(m, [2, 1], [0, 2, 0, 0, 0, 1, 0, 0], shared))
    a, out = transform("cbpo", b)
    want = a.copy()
    want[0, :2] = (a[0, 0] + a[1, 0]) / 2
    want[4, :1] = (a[4, 0] + a[5, 0]) / 2
    want[0, 2:] *= 2
    want[1, 2:] *= 2
    want[1, :2] = 0
    want[4, 1:] *= 0.1
    want[5, 1:] *= 0.1
    want[5, :1] = 0
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # zero_sum (ours): the rescaled credit's group sums are not 0; with it they are, and
    # every token keeps its sign.
    mask, group = b["mask_BxT"], b["group_B"]
    sums = lambda x: np.array([x[group == g][mask[group == g]].sum() for g in np.unique(group)])
    assert np.abs(sums(out)).max() > 1e-3
    _, zs = transform("cbpo", b, zero_sum=True)
    np.testing.assert_allclose(sums(zs), 0.0, atol=1e-5)
    assert (np.sign(zs[mask]) == np.sign(out[mask])).all()


def cbpo_reduces():
    # No node (padding slots only): GRPO; two nodes of equal CBV: factors 1, GRPO.
    b = make_batch(**_branches(np.zeros((2, B), bool), [-1, -1], np.zeros(B)))
    a, out = transform("cbpo", b)
    np.testing.assert_allclose(out, a, **TOL)
    m = np.zeros((2, B), bool)
    m[0, [0, 1]] = True
    m[1, [6, 7]] = True  # rewards 1, 0 in both nodes
    a, out = transform("cbpo", make_batch(**_branches(m, [1, 2], np.zeros(B))), eps=0.0)
    np.testing.assert_allclose(out, a, **TOL)


def _answers(ids, start=None, end=None):
    start = np.full(B, -1) if start is None else np.asarray(start)
    end = np.full(B, -1) if end is None else np.asarray(end)
    return dict(
        answer_id_B=np.asarray(ids, np.int32),
        answer_start_B=start.astype(np.int32),
        answer_end_B=end.astype(np.int32),
    )


def om_grpo_differs():
    # Group 0 answers (7, 7, 7, 8): consensus (.75, .75, .75, .25) although the verifier
    # passes rows 0 and 2 only: GRPO of the consensus = (.5, .5, .5, −1.5); the answer span
    # (tokens 1..2 of row 0) gets no gradient.
    start, end = np.full(B, -1), np.full(B, -1)
    start[0], end[0] = 1, 3
    b = make_batch(**_answers([7, 7, 7, 8, 1, 1, 1, 2], start, end))
    _, out = transform("om_grpo", b)
    want = np.array([0.5, 0.5, 0.5, -1.5, 0.5, 0.5, 0.5, -1.5])[:, None] * MASK
    want[0, 1:3] = 0
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def om_grpo_reduces():
    # Consensus affine in the verdict (correct rows share one answer, wrong rows each
    # another): GRPO's normalisation makes it the verifier's GRPO; no span masked.
    b = make_batch(**_answers([7, 8, 7, 9, 1, 1, 1, 2]))
    a, out = transform("om_grpo", b, mask_answer=False)
    np.testing.assert_allclose(out, a, rtol=1e-5, atol=1e-6)


def om_contrast_differs():
    # λ = .5: r' = .5·consensus + .5·win rate. Group 0 answers (7, 7, 8, 9): consensus
    # (.5, .5, .25, .25); rows 0, 1 beat rows 2, 3 (win rate 1); rows 2, 3 lost to 0 and 1
    # and tied each other (win rate .5/3): r' = (.75, .75, .2083, .2083), then GRPO.
    ids = [7, 7, 8, 9, 1, 1, 1, 2]
    wins = np.zeros((B, B), np.float32)
    comp = np.zeros((B, B), bool)
    for i, j, p in [(0, 2, 1), (0, 3, 1), (1, 2, 1), (1, 3, 1), (2, 3, 0.5)]:
        comp[i, j] = comp[j, i] = True
        wins[i, j], wins[j, i] = p, 1 - p
    b = make_batch(**_answers(ids), pair_wins_BxB=wins, pair_compared_BxB=comp)
    _, out = transform("om_grpo_contrast", b, mask_answer=False)
    r0 = np.array([0.75, 0.75, 0.125 + 0.25 / 3, 0.125 + 0.25 / 3])
    want0 = (r0 - r0.mean()) / (r0.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(out[:4], want0[:, None] * MASK[:4], rtol=1e-5, atol=1e-6)


def om_contrast_reduces():
    # λ = 0 is OM-GRPO.
    b = make_batch(
        **_answers([7, 7, 8, 9, 1, 1, 1, 2]),
        pair_wins_BxB=np.full((B, B), 0.5, np.float32),
        pair_compared_BxB=np.ones((B, B), bool),
    )
    _, out = transform("om_grpo_contrast", b, lam=0.0)
    _, want = transform("om_grpo", b)
    np.testing.assert_allclose(out, want, **TOL)


def answer_mask_differs():
    start, end = np.full(B, -1), np.full(B, -1)
    start[[1, 5]], end[[1, 5]] = 2, 4
    a, out = transform("answer_mask", make_batch(**_answers(np.zeros(B), start, end)))
    want = a.copy()
    want[[1, 5], 2:4] = 0  # the answer tokens lose exactly their advantage
    np.testing.assert_allclose(out, want, **TOL)


def answer_mask_reduces():
    a, out = transform("answer_mask", make_batch(**_answers(np.zeros(B))))
    np.testing.assert_allclose(out, a, **TOL)


def opdvr_differs():
    # ReLU gate: correct rows keep max(0, d), wrong rows min(0, d); replaces A.
    d = _d()
    _, out = transform("opdvr", with_d(d))
    want = np.where(CORRECT[:, None], np.maximum(d, 0), np.minimum(d, 0)) * MASK
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def opdvr_reduces():
    # Gate "none": plain OPD, d; with the RL advantage kept and a teacher equal to the
    # student: GRPO.
    d = _d()
    _, out = transform("opdvr", with_d(d), gate="none")
    np.testing.assert_allclose(out, d * MASK, rtol=1e-5, atol=1e-6)
    a, out = transform("opdvr", with_d(np.zeros((B, T))), rl_coef=1.0)
    np.testing.assert_allclose(out, a, **TOL)


def opd_additive_differs():
    d = _d()
    a, out = transform("opd_additive", with_d(d), weight=0.3)
    np.testing.assert_allclose(out - a, 0.3 * d * MASK, rtol=1e-5, atol=1e-6)


def opd_additive_reduces():
    a, out = transform("opd_additive", with_d(_d()), weight=0.0)
    np.testing.assert_allclose(out, a, **TOL)


def opd_rescale_differs():
    # f = clip(exp(d), .5, 2): d = log 3 → 2, d = log .8 → .8.
    d = np.where(np.arange(T) % 2 == 0, math.log(3), math.log(0.8))[None].repeat(B, 0)
    a, out = transform("opd_rescale", with_d(d))
    np.testing.assert_allclose(out, a * np.where(np.arange(T) % 2 == 0, 2.0, 0.8), rtol=1e-5)


def opd_rescale_reduces():
    a, out = transform("opd_rescale", with_d(np.zeros((B, T))))
    np.testing.assert_allclose(out, a, **TOL)


def saf_differs():
    # Sparsify and compress off, weight w_max = .7 without schedule: A + .7·d.
    d = _d()
    hp = dict(sparsify=False, compress=False, schedule=False, w_max=0.7)
    a, out = transform("saf_opd", with_d(d), **hp)
    np.testing.assert_allclose(out - a, 0.7 * d * MASK, rtol=1e-5, atol=1e-6)


def saf_reduces():
    # Step 0 of the warm-up: w(0) = 0, GRPO (the schedule's start).
    a, out = transform("saf_opd", with_d(_d()), step=0)
    np.testing.assert_allclose(out, a, **TOL)


def rstg_differs():
    # Group 1 made all-wrong: its rows (A = 0) get the OPD reward d on every token
    # (selection "none", no confidence weight, λ = 1); group 0 keeps A.
    d = _d()
    correct = CORRECT.copy()
    correct[4:] = False
    b = with_d(d, correct_B=correct, rewards_B=correct.astype(np.float32))
    a = grpo(b)
    params = {"rstg": dict(token_select="none", keep_frac=0.2, confidence=False, coef=1.0)}
    out = np.asarray(credit.apply_transforms(["rstg"], a, b, params))
    np.testing.assert_allclose(out[:4], a[:4], **TOL)
    np.testing.assert_allclose(out[4:], d[4:] * MASK[4:], rtol=1e-5, atol=1e-6)


def rstg_reduces():
    # No all-wrong group in the batch: GRPO.
    a, out = transform("rstg", with_d(_d()))
    np.testing.assert_allclose(out, a, **TOL)


def h2sd_differs():
    # Correct row 0 (5 tokens), d = (log 3, 0, 0, 0, log .25): m = clip(exp d, .5, 2) =
    # (2, 1, 1, 1, .5), renormalised to mean 1 (÷ 1.1). Wrong row 1: A + d.
    d = np.zeros((B, T))
    d[0] = [math.log(3), 0, 0, 0, math.log(0.25)]
    d[1, :4] = [0.2, -0.4, 0.1, 0.0]
    a, out = transform("h2sd", with_d(d, key="hint_logps_BxT"))
    np.testing.assert_allclose(out[0], A0 * np.array([2, 1, 1, 1, 0.5]) / 1.1, rtol=1e-5)
    np.testing.assert_allclose(out[1], a[1] + d[1] * MASK[1], rtol=1e-5, atol=1e-6)


def h2sd_reduces():
    a, out = transform("h2sd", with_d(np.zeros((B, T)), key="hint_logps_BxT"))
    np.testing.assert_allclose(out, a, **TOL)


def rlsd_differs():
    # RLSD's reference rule (rule "reference", the default):
    # w_t = 1 + λ(clip(exp(sign(A)·d_t), .8, 1.2) − 1),
    # λ = .5. Correct row 0 (A > 0): d = (ln 3, 0, 0, 0, ln .25) → (1.1, 1, 1, 1, .9).
    # Wrong row 1 (A < 0): d = (.2, −.4, .1, 0) → exp(−d) = (.819, 1.492, .905, 1): the
    # token the teacher finds unlikely (d = −.4) takes MORE of the penalty (w = 1.1), where
    # the magnitude rule gave it less. Signs never change.
    d = np.zeros((B, T))
    d[0] = [math.log(3), 0, 0, 0, math.log(0.25)]
    d[1, :4] = [0.2, -0.4, 0.1, 0.0]
    b = with_d(d, key="hint_logps_BxT")
    a, out = transform("rlsd", b)  # the default rule
    np.testing.assert_allclose(out[0], A0 * np.array([1.1, 1, 1, 1, 0.9]), rtol=1e-5)
    w1 = 1 + 0.5 * (np.clip(np.exp(-d[1, :4]), 0.8, 1.2) - 1)
    np.testing.assert_allclose(w1, [0.909365, 1.1, 0.952419, 1.0], rtol=1e-5)
    np.testing.assert_allclose(out[1, :4], -A0 * w1, rtol=1e-5)
    np.testing.assert_allclose(out[2:], a[2:], **TOL)  # d = 0: w = 1
    assert (np.sign(out) == np.sign(a)).all()
    # Our magnitude rule (an option): exp(d) whatever the sign, renormalised.
    a, out = transform("rlsd", b, rule="magnitude")
    np.testing.assert_allclose(out[0], A0 * np.array([2, 1, 1, 1, 0.5]) / 1.1, rtol=1e-5)
    w = np.exp(d[1, :4])
    np.testing.assert_allclose(out[1, :4], -A0 * w / w.mean(), rtol=1e-5)
    assert out[1, 1] > -A0 > out[1, 0]  # d = −.4 gets less of the penalty, d = .2 more


def rlsd_reduces():
    # ℓ^H = ℓ^S: every m_t = 1, GRPO.
    a, out = transform("rlsd", with_d(np.zeros((B, T)), key="hint_logps_BxT"))
    np.testing.assert_allclose(out, a, **TOL)


def cpo_differs():
    # A + λ·τ·tanh(d/τ) with λ_correct = .1, λ_wrong = .3 (τ = 1).
    d = _d(scale=1.5)
    a, out = transform("cpo", with_d(d, key="hint_logps_BxT"), lam_wrong=0.3)
    lam = np.where(CORRECT, 0.1, 0.3)[:, None]
    np.testing.assert_allclose(out - a, lam * np.tanh(d) * MASK, rtol=1e-5, atol=1e-6)


def cpo_reduces():
    # The abstract: OPD is CPO with an external teacher as the guided distribution
    # (β = 0, λ = 1, no tanh): equal to plain OPD ("opdvr", gate "none") on that teacher.
    d = _d()
    b = with_d(d, key="hint_logps_BxT")
    b["teacher_logps_BxT"] = b["hint_logps_BxT"]
    _, out = transform("cpo", b, beta=0.0, lam_correct=1.0, lam_wrong=1.0, tau=0.0)
    _, opd = transform("opdvr", b, gate="none")
    np.testing.assert_allclose(out, opd, **TOL)
    a, out = transform("cpo", b, lam_correct=0.0, lam_wrong=0.0)  # λ = 0: GRPO
    np.testing.assert_allclose(out, a, **TOL)


def entropy_shaping_differs():
    # A + min(α·H, |A|/κ), α = .4, κ = 2.
    b = make_batch()
    a, out = transform("entropy_shaping", b)
    psi = np.minimum(0.4 * b["entropy_BxT"], np.abs(a) / 2) * MASK
    np.testing.assert_allclose(out - a, psi, rtol=1e-5, atol=1e-6)


def entropy_shaping_reduces():
    a, out = transform("entropy_shaping", make_batch(), alpha=0.0)
    np.testing.assert_allclose(out, a, **TOL)


def opsa_differs():
    # −c·H_t / mean H over the batch's tokens, c = 1.
    b = make_batch()
    _, out = transform("opsa", b)
    h = b["entropy_BxT"]
    np.testing.assert_allclose(out, -h / h[MASK].mean() * MASK, rtol=1e-5, atol=1e-6)


def opsa_reduces():
    # The fixed-negative ablation is −c on every token; with c = 0 and the RL advantage
    # kept: GRPO.
    _, out = transform("opsa", make_batch(), entropy_scaled=False, c=0.7)
    np.testing.assert_allclose(out, -0.7 * MASK, **TOL)
    a, out = transform("opsa", make_batch(), c=0.0, rl_coef=1.0)
    np.testing.assert_allclose(out, a, **TOL)


def opd_denoised_differs():
    # Verdict criterion: a correct row's d < 0 and a wrong row's d > 0 are noise → 0.
    d = _d()
    _, out = transform("opd_denoised", with_d(d))
    noisy = np.where(CORRECT[:, None], d < 0, d > 0)
    np.testing.assert_allclose(out, np.where(noisy, 0, d) * MASK, rtol=1e-5, atol=1e-6)


def opd_denoised_reduces():
    # No noisy token (d ≥ 0 on correct rows, ≤ 0 on wrong ones): plain OPD.
    d = np.abs(_d()) * np.where(CORRECT, 1, -1)[:, None]
    _, out = transform("opd_denoised", with_d(d))
    np.testing.assert_allclose(out, d * MASK, rtol=1e-5, atol=1e-6)


def cscr_differs():
    # Row 0: s = (0, 1, 0, 1, 0) (both shifts equal): w̃ = (1, .5, 1, .5, 1)^α=1, Σ 4 →
    # w = w̃·5/4. Sum of A'_t over the row stays 5·A.
    s = np.zeros((B, T), np.float32)
    s[0] = [0, 1, 0, 1, 0]
    b = make_batch(cf_shift_correct_BxT=s, cf_shift_incorrect_BxT=-s)
    a, out = transform("cscr", b)
    np.testing.assert_allclose(out[0], A0 * np.array([1, 0.5, 1, 0.5, 1]) * 5 / 4, rtol=1e-5)
    np.testing.assert_allclose(out[1:], a[1:], **TOL)


def cscr_reduces():
    s = np.ones((B, T), np.float32)  # equal sensitivity everywhere: w = 1
    a, out = transform("cscr", make_batch(cf_shift_correct_BxT=s, cf_shift_incorrect_BxT=s))
    np.testing.assert_allclose(out, a, **TOL)


def pair_differs():
    # Â_i = 1/(G−1)·Σ_{j≠i} (r_i − r_j)/(π_i π_j); group 0 rewards (1, 0, 1, 0) with row 1
    # completed with probability π = .5: Â = (1, −4/3, 1, −2/3) instead of RLOO's ±2/3.
    pi = np.ones(B, np.float32)
    pi[1] = 0.5
    b = make_batch(incl_prob_B=pi, candidates_B=np.full(B, 4, np.int32))
    _, out = transform("pair", b)
    np.testing.assert_allclose(out[:4], np.array([1, -4 / 3, 1, -2 / 3])[:, None] * MASK[:4], **TOL)


def pair_reduces():
    # Every π = 1: RLOO's leave-one-out advantage r_i − mean of the other G − 1.
    b = make_batch(incl_prob_B=np.ones(B, np.float32), candidates_B=np.full(B, 4, np.int32))
    _, out = transform("pair", b)
    r = CORRECT.astype(np.float64).reshape(2, 4)
    loo = (r - (r.sum(1, keepdims=True) - r) / 3).ravel()
    np.testing.assert_allclose(out, loo[:, None] * MASK, **TOL)


def grsd_differs():
    # Row 0 (A0 > 0) has ℓ^T − ℓ^S = .3 on every token: w = e^.3; row 1 (−A0) the same gap:
    # w = e^−.3 (a failure the guidance expects is penalised less); row 7 (−3·A1) gap −2:
    # e^2 clipped to 2. Rows without a gap keep A.
    d = np.zeros((B, T))
    d[0], d[1], d[7] = 0.3, 0.3, -2.0
    a, out = transform("grsd", with_d(d, key="guidance_logps_BxT"))
    want = a.copy()
    want[0] *= np.exp(0.3)
    want[1] *= np.exp(-0.3)
    want[7] *= 2.0
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def grsd_reduces():
    # The self-teacher agrees with the policy (no guidance): every weight is 1; λ = 0 too.
    a, out = transform("grsd", with_d(np.zeros((B, T)), key="guidance_logps_BxT"))
    np.testing.assert_allclose(out, a, **TOL)
    a, out = transform("grsd", with_d(_d(), key="guidance_logps_BxT"), lam=0.0)
    np.testing.assert_allclose(out, a, **TOL)


TRANSFORM_CASES = {
    "answer_mask": (answer_mask_differs, answer_mask_reduces),
    "cbpo": (cbpo_differs, cbpo_reduces),
    "cliff": (cliff_differs, cliff_reduces),
    "cpo": (cpo_differs, cpo_reduces),
    "cscr": (cscr_differs, cscr_reduces),
    "cue_grpo": (cue_differs, cue_reduces),
    "grsd": (grsd_differs, grsd_reduces),
    "dash": (dash_differs, dash_reduces),
    "entropy_shaping": (entropy_shaping_differs, entropy_shaping_reduces),
    "h2sd": (h2sd_differs, h2sd_reduces),
    "rlsd": (rlsd_differs, rlsd_reduces),
    "om_grpo": (om_grpo_differs, om_grpo_reduces),
    "om_grpo_contrast": (om_contrast_differs, om_contrast_reduces),
    "opd_additive": (opd_additive_differs, opd_additive_reduces),
    "opd_denoised": (opd_denoised_differs, opd_denoised_reduces),
    "opd_rescale": (opd_rescale_differs, opd_rescale_reduces),
    "opdvr": (opdvr_differs, opdvr_reduces),
    "opsa": (opsa_differs, opsa_reduces),
    "pair": (pair_differs, pair_reduces),
    "rstg": (rstg_differs, rstg_reduces),
    "saf_opd": (saf_differs, saf_reduces),
}


@pytest.mark.parametrize("name", sorted(TRANSFORM_CASES))
@pytest.mark.parametrize("case", ["differs", "reduces"])
def test_transform(name, case):
    TRANSFORM_CASES[name][case == "reduces"]()


# ============================================================================ losses
RHO = np.exp(np.linspace(-0.35, 0.35, T))  # token ratios π_θ/π_old 0.70 .. 1.42


def loss(name, adv_BxT, logps=None, mb_extra=None, **hp):
    """Per-token loss of policy loss `name` (its registry defaults overridden by hp)."""
    b = make_batch()
    old = b["old_logps_BxT"]
    logps = old + np.log(RHO)[None] * MASK if logps is None else logps
    entry = objectives.POLICY_LOSSES.get(name)
    kw = {**entry.defaults, **hp}
    mb = {"mask_BxT": MASK, "old_logps_BxT": old, "adv_BxT": adv_BxT, **(mb_extra or {})}
    if "group_success_B" in entry.requires and "group_success_B" not in mb:
        # Each row's group success rate (GAPO's clip-rate buckets; the loss ignores it).
        rate = np.array([CORRECT[GROUP == g].mean() for g in GROUP], np.float32)
        mb["group_success_B"] = rate
    extra = {"mb": mb} if entry.requires else {}
    if entry.minibatch_stats is not None:  # e.g. GAPO's Ā, over the whole minibatch
        extra["minibatch"] = entry.minibatch_stats(mb, **kw)
    out, _ = entry.fn(jnp.asarray(logps), old, jnp.asarray(adv_BxT), MASK, **extra, **kw)
    return np.asarray(out)


def ppo(adv_BxT, eps_low=0.2, eps_high=0.2):
    rho = RHO[None]
    return -np.minimum(rho * adv_BxT, np.clip(rho, 1 - eps_low, 1 + eps_high) * adv_BxT) * MASK


ADV = A_ROWS[:, None] * MASK


def ppo_clip_differs():
    # Clip-higher ε_high = .28 vs the symmetric .2: a positive-A token at ρ = 1.42 has
    # loss −1.28·A instead of −1.2·A.
    out = loss("ppo_clip", ADV, eps_high=0.28)
    np.testing.assert_allclose(out, ppo(ADV, 0.2, 0.28), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[0, 4], -1.28 * A0, rtol=1e-5)


def ppo_clip_reduces():
    # At ρ = 1 the surrogate is the policy-gradient loss −A.
    b = make_batch()
    np.testing.assert_allclose(loss("ppo_clip", ADV, logps=b["old_logps_BxT"]), -ADV, **TOL)


def _seq_ratio():
    lr = np.log(RHO)[None] * MASK
    return np.exp(lr.sum(1) / MASK.sum(1))


def gspo_differs():
    # s_i = exp(mean_t log ρ): rows of 5 tokens have s = 1 (symmetric ratios), row 4
    # (2 tokens) has s = exp(mean(log ρ_0, log ρ_1)); the loss is −min(sA, clip(s)A) on
    # each token, not the per-token PPO loss.
    s = _seq_ratio()
    out = loss("gspo", ADV)
    clip = np.clip(s, 1 - 3e-4, 1 + 4e-4)
    want = -np.minimum(s * A_ROWS, clip * A_ROWS)[:, None] * MASK
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, ppo(ADV, 3e-4, 4e-4), atol=1e-3)


def gspo_reduces():
    # Equal token ratios in a row (ρ = 1.1 everywhere): s = ρ and GSPO is token PPO.
    b = make_batch()
    lp = b["old_logps_BxT"] + math.log(1.1) * MASK
    out = loss("gspo", ADV, logps=lp, eps_low=0.2, eps_high=0.2)
    want = -np.minimum(1.1 * ADV, 1.1 * ADV) * MASK  # 1.1 is inside [0.8, 1.2]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def gspo_token_differs():
    # Per-token advantages: token t of row 0 gets A_t·s (s = 1 inside the clip range).
    adv = ADV * np.linspace(0.5, 1.5, T)[None]
    out = loss("gspo_token", adv)
    s = _seq_ratio()
    np.testing.assert_allclose(out[0], -s[0] * adv[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0], out[0, 0])


def gspo_token_reduces():
    # A_{i,t} = A_i: GSPO's loss on every token.
    np.testing.assert_allclose(loss("gspo_token", ADV), loss("gspo", ADV), rtol=1e-5, atol=1e-6)


def gapo_differs():
    # |A| = A0 (rows 0–3), A1 (4–6), 3·A1 (7): Ā = mean = (4·A0 + 6·A1)/8 and
    # ε_i = clip(.2·|A_i|/Ā, .1, .5). Row 7's token at ρ = .70 with A < 0: PPO at .2 clips at
    # .8 (loss 1.2), GAPO at 1 − ε_7 (< .8).
    abar = (4 * A0 + 6 * A1) / 8
    eps = np.clip(0.2 * np.abs(A_ROWS) / abar, 0.1, 0.5)
    out = loss("gapo", ADV)
    rho = RHO[None]
    want = -np.minimum(rho * ADV, np.clip(rho, 1 - eps[:, None], 1 + eps[:, None]) * ADV) * MASK
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert abs(out[7, 0] - ppo(ADV)[7, 0]) > 0.01


def gapo_reduces():
    # Equal |A_i|: every ε_i = ε0, GAPO is PPO clip at ε0.
    adv = np.where(CORRECT, 1.0, -1.0)[:, None] * MASK
    np.testing.assert_allclose(loss("gapo", adv), ppo(adv), rtol=1e-5, atol=1e-6)


def gapo_gspo_differs():
    # GSPO's ratio with per-rollout bounds ε_i = clip(3e-4·|A_i|/Ā, 1.5e-4, 1e-3): row 4's
    # s = exp(mean log ρ_{0,1}) < 1 − 3e-4 is clipped at 1 − ε_4.
    s = _seq_ratio()
    abar = (4 * A0 + 6 * A1) / 8
    lo = np.clip(3e-4 * np.abs(A_ROWS) / abar, 1.5e-4, 1e-3)
    hi = np.clip(4e-4 * np.abs(A_ROWS) / abar, 1.5e-4, 1e-3)
    want = -np.minimum(s * A_ROWS, np.clip(s, 1 - lo, 1 + hi) * A_ROWS)[:, None] * MASK
    np.testing.assert_allclose(loss("gapo_gspo", ADV), want, rtol=1e-5, atol=1e-6)


def gapo_gspo_reduces():
    adv = np.where(CORRECT, 1.0, -1.0)[:, None] * MASK
    np.testing.assert_allclose(loss("gapo_gspo", adv), loss("gspo", adv), rtol=1e-5, atol=1e-6)


def h2sd_kl_differs():
    # Failed rows add λ·ρ_t·(ℓ_θ − ℓ^H); at θ = θ_old that is the k1 estimate ℓ^S − ℓ^H = −d.
    b = make_batch()
    d = _d()
    hint = b["old_logps_BxT"] + d * MASK
    extra = {"hint_logps_BxT": hint, "correct_B": CORRECT}
    out = loss("h2sd_kl", ADV, logps=b["old_logps_BxT"], mb_extra=extra)
    want = -ADV + np.where(CORRECT[:, None], 0, -d) * MASK
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def h2sd_kl_reduces():
    b = make_batch()
    extra = {"hint_logps_BxT": b["old_logps_BxT"] + _d() * MASK, "correct_B": CORRECT}
    out = loss("h2sd_kl", ADV, mb_extra=extra, kl_coef=0.0)
    np.testing.assert_allclose(out, ppo(ADV), rtol=1e-5, atol=1e-6)


D, V = 3, 7


def _vocab_fields(seed=0, same=False):
    """Student/teacher hidden states and kernels (D = 3, V = 7) on the batch's positions."""
    rng = np.random.default_rng(seed)
    h_s, w_s = rng.normal(0, 1, (B, T, D)), rng.normal(0, 1, (D, V))
    h_t, w_t = (h_s, w_s) if same else (rng.normal(0, 1, (B, T, D)), rng.normal(0, 1, (D, V)))
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    return dict(
        hidden_BxTxD=f32(h_s),
        output_kernel_DxV=f32(w_s),
        teacher_hidden_BxTxD=f32(h_t),
        teacher_kernel_DxV=f32(w_t),
        correct_B=CORRECT,
    )


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_kl(f, k=None):
    """KL(π_s ‖ π_t) per token, over the teacher's top-k (renormalised) when k is given."""
    ls = _log_softmax(f["hidden_BxTxD"] @ f["output_kernel_DxV"])
    lt = _log_softmax(f["teacher_hidden_BxTxD"] @ f["teacher_kernel_DxV"])
    if k is not None:
        ids = np.argsort(-lt, -1)[..., :k]
        ls = _log_softmax(np.take_along_axis(ls, ids, -1))
        lt = _log_softmax(np.take_along_axis(lt, ids, -1))
    return (np.exp(ls) * (ls - lt)).sum(-1)


def _topk_fields(f, k):
    lt = _log_softmax(f["teacher_hidden_BxTxD"] @ f["teacher_kernel_DxV"])
    ids = np.argsort(-lt, -1)[..., :k]
    return dict(
        f,
        teacher_topk_ids_BxTxK=ids.astype(np.int32),
        teacher_topk_logps_BxTxK=np.take_along_axis(lt, ids, -1).astype(np.float32),
    )


def opd_full_kl_differs():
    # rl_coef = 0, rows "all": the loss is the full-vocabulary reverse KL (NumPy softmax
    # over V = 7), > 0 on every token; rows "failed" keeps only the wrong rows' KL.
    f = _vocab_fields()
    kl = _np_kl(f) * MASK
    np.testing.assert_allclose(loss("opd_full_kl", ADV, mb_extra=f), kl, rtol=1e-5, atol=1e-6)
    assert kl[MASK].min() > 1e-3
    out = loss("opd_full_kl", ADV, mb_extra=f, rows="failed", rl_coef=1.0)
    want = ppo(ADV) + np.where(CORRECT[:, None], 0, kl)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def opd_full_kl_reduces():
    # The teacher is the student: KL = 0, and with rl_coef = 1 the loss is PPO clip.
    out = loss("opd_full_kl", ADV, mb_extra=_vocab_fields(same=True), rl_coef=1.0)
    np.testing.assert_allclose(out, ppo(ADV), rtol=1e-5, atol=1e-5)


def opd_topk_kl_differs():
    # k = 2: the KL of both distributions renormalised on the teacher's 2 best tokens.
    f = _topk_fields(_vocab_fields(), 2)
    kl = _np_kl(f, k=2) * MASK
    np.testing.assert_allclose(loss("opd_topk_kl", ADV, mb_extra=f), kl, rtol=1e-5, atol=1e-6)
    assert kl[MASK].max() > 1e-3


def opd_topk_kl_reduces():
    # k = V (the whole vocabulary): the top-k KL is the full one (opd_full_kl).
    f = _topk_fields(_vocab_fields(), V)
    full = loss("opd_full_kl", ADV, mb_extra=f)
    np.testing.assert_allclose(loss("opd_topk_kl", ADV, mb_extra=f), full, rtol=1e-5, atol=1e-6)


def _behaviour(delta):
    return {"behaviour_logps_BxT": make_batch()["old_logps_BxT"] - delta * MASK}


def oc_grpo_differs():
    # Token weight w = clip(π_old/μ, 0, 2): log π_old − log μ = log 1.5 → 1.5, log 3 → 2.
    delta = np.where(np.arange(T) < 2, math.log(1.5), math.log(3.0))[None]
    out = loss("oc_grpo", ADV, mb_extra=_behaviour(delta))
    w = np.where(np.arange(T) < 2, 1.5, 2.0)[None]
    np.testing.assert_allclose(out, w * ppo(ADV), rtol=1e-5, atol=1e-6)


def oc_grpo_reduces():
    # On-policy rows (μ = π_old): w = 1 exactly, PPO clip.
    out = loss("oc_grpo", ADV, mb_extra=_behaviour(np.zeros((1, T))))
    np.testing.assert_allclose(out, ppo(ADV), **TOL)


def lspo_differs():
    # Sequence weight w_i = clip(exp(mean_t (ℓ^old − ℓ^μ)), 0, 2) = 1.5 on every row.
    out = loss("lspo", ADV, mb_extra=_behaviour(np.full((1, T), math.log(1.5))))
    np.testing.assert_allclose(out, 1.5 * ppo(ADV), rtol=1e-5, atol=1e-6)


def lspo_reduces():
    out = loss("lspo", ADV, mb_extra=_behaviour(np.zeros((1, T))))
    np.testing.assert_allclose(out, ppo(ADV), **TOL)


LOSS_CASES = {
    "gapo": (gapo_differs, gapo_reduces),
    "gapo_gspo": (gapo_gspo_differs, gapo_gspo_reduces),
    "gspo": (gspo_differs, gspo_reduces),
    "gspo_token": (gspo_token_differs, gspo_token_reduces),
    "h2sd_kl": (h2sd_kl_differs, h2sd_kl_reduces),
    "lspo": (lspo_differs, lspo_reduces),
    "oc_grpo": (oc_grpo_differs, oc_grpo_reduces),
    "opd_full_kl": (opd_full_kl_differs, opd_full_kl_reduces),
    "opd_topk_kl": (opd_topk_kl_differs, opd_topk_kl_reduces),
    "ppo_clip": (ppo_clip_differs, ppo_clip_reduces),
}


@pytest.mark.parametrize("name", sorted(LOSS_CASES))
@pytest.mark.parametrize("case", ["differs", "reduces"])
def test_loss(name, case):
    LOSS_CASES[name][case == "reduces"]()


def test_every_registered_method_has_both_cases():
    from .test_method_noop_signals import SIGNAL_CASES

    assert sorted(TRANSFORM_CASES) == sorted(credit.TRANSFORMS.names())
    assert sorted(LOSS_CASES) == sorted(objectives.POLICY_LOSSES.names())
    from rlvr_jax.rl import signals

    assert sorted(SIGNAL_CASES) == sorted(signals.SIGNALS.names())
