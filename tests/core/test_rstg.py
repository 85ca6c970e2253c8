import math

import numpy as np
import pytest

from rlvr_jax.core import rstg


def _ref(adv, teacher, student, ent, correct, group, valid, mask, select, frac, conf, coef):
    b, t = mask.shape
    rows = []
    for i in range(b):
        same = [k for k in range(b) if group[k] == group[i] and valid[k]]
        rows.append(valid[i] and not any(correct[k] for k in same))
    cand = [(i, j) for i in range(b) for j in range(t) if rows[i] and mask[i, j]]
    r = {ij: float(teacher[ij]) - float(student[ij]) for ij in cand}

    def top(score):
        if not cand:
            return set()
        k = max(1, math.ceil(frac * len(cand)))
        thr = sorted((score[ij] for ij in cand), reverse=True)[k - 1]
        return {ij for ij in cand if score[ij] >= thr}

    hi_h = top({ij: float(ent[ij]) for ij in cand})
    hi_d = top({ij: abs(r[ij]) for ij in cand})
    sel = {"entropy": hi_h, "divergence": hi_d, "either": hi_h | hi_d, "both": hi_h & hi_d}
    sel = sel.get(select, set(cand))
    out = np.where(mask, adv, 0.0).astype(np.float64)
    for i, j in sel:
        toks = [float(teacher[i, k]) for k in range(t) if mask[i, k]]
        w = math.exp(sum(toks) / len(toks)) if conf else 1.0
        out[i, j] += coef * w * r[(i, j)]
    return out


def _inputs(rng, groups, g):
    b, t = groups * g, 7
    group = np.repeat(rng.permutation(groups), g).astype(np.int32)
    correct = rng.random(b) < 0.3
    correct[group == group[0]] = False  # at least one all-wrong group
    valid = rng.random(b) < 0.9
    mask = rng.random((b, t)) < 0.7
    mask[:, 0] = True
    mask[-1] = False  # fully masked row
    adv = np.repeat(rng.normal(size=(b, 1)), t, 1).astype(np.float32) * mask
    teacher = rng.normal(-1, 1, (b, t)).astype(np.float32)
    student = rng.normal(-1, 1, (b, t)).astype(np.float32)
    ent = rng.gamma(1.0, 1.0, (b, t)).astype(np.float32)
    return adv, teacher, student, ent, correct, group, valid, mask


@pytest.mark.parametrize("select", rstg.TOKEN_SELECTIONS)
@pytest.mark.parametrize("layout", [(3, 4), (5, 2), (1, 1)])
def test_rstg_matches_loop_reference(select, layout):
    rng = np.random.default_rng(layout[0] * 7 + len(select))
    args = _inputs(rng, *layout)
    got = rstg.rstg_advantages(
        *args, num_groups=len(args[0]), token_select=select, keep_frac=0.3, coef=0.5
    )
    want = _ref(*args, select, 0.3, True, 0.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(np.asarray(got)))


def test_rstg_hand_computed():
    # Group 0 all wrong (rows 0, 1), group 1 has a correct row: untouched.
    mask = np.ones((4, 2), bool)
    teacher = np.log(np.full((4, 2), 0.5, np.float32))
    student = np.log(np.array([[0.25, 0.5], [0.5, 0.5], [0.25, 0.25], [0.5, 0.5]], np.float32))
    adv = np.array([[0, 0], [0, 0], [1, 1], [-1, -1]], np.float32)
    got = rstg.rstg_advantages(
        adv,
        teacher,
        student,
        np.zeros((4, 2)),
        np.array([0, 0, 1, 0], bool),
        np.array([0, 0, 1, 1]),
        np.ones(4, bool),
        mask,
        num_groups=2,
        token_select="divergence",
        keep_frac=0.25,
    )
    # Only token (0, 0) has divergence log 2; confidence exp(log 0.5) = 0.5.
    want = adv.copy()
    want[0, 0] = 0.5 * math.log(2)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)


def test_rstg_all_correct_batch_is_unchanged():
    rng = np.random.default_rng(0)
    adv, teacher, student, ent, _, group, valid, mask = _inputs(rng, 2, 3)
    got = rstg.rstg_advantages(
        adv, teacher, student, ent, np.ones(6, bool), group, valid, mask, num_groups=6
    )
    np.testing.assert_array_equal(np.asarray(got), np.where(mask, adv, 0))
    with pytest.raises(ValueError, match="either"):
        rstg.select_tokens(ent, ent, mask, criterion="top")
