import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.core import gar

# Jitted once per shape: whole-function compiles beat op-by-op dispatch for these graphs.
_decomposition = jax.jit(gar.cosine_decomposition, static_argnames="chunk")
_rewards = jax.jit(gar.gar_rewards, static_argnums=3)


# ----------------------------------------------------------------- NumPy references (loops)
def _ref_grads(h, w, y, m):
    b, t, d = h.shape
    out = np.zeros((b, t, d))
    for i in range(b):
        for j in range(t):
            if not m[i, j]:
                continue
            logits = w.astype(np.float64) @ h[i, j].astype(np.float64)
            p = np.exp(logits - logits.max())
            p /= p.sum()
            p[y[i, j]] -= 1.0
            out[i, j] = w.astype(np.float64).T @ p
    return out


def _ref_sig(h, w, y, m, variant):
    g = _ref_grads(h, w, y, m)
    out = np.zeros((h.shape[0], h.shape[2]))
    for i in range(h.shape[0]):
        s = np.zeros(h.shape[2])
        for j in range(h.shape[1]):
            if m[i, j]:
                s += g[i, j] * h[i, j] if variant == "grad_hidden" else g[i, j]
        n = np.linalg.norm(s)
        out[i] = s / n if n > 0 else 0.0
    return out


def _ref_rewards(align, passed, groups, beta, anchored=None, min_group=2):
    anchored = np.ones_like(passed) if anchored is None else anchored
    out = np.zeros(len(align))
    for i in range(len(align)):
        if not passed[i]:
            continue
        peers = [
            align[j]
            for j in range(len(align))
            if groups[j] == groups[i] and passed[j] and anchored[j]
        ]
        mean = np.mean(peers) if len(peers) >= min_group else 0.0
        bonus = max(0.0, align[i] - mean) if anchored[i] else 0.0
        out[i] = 1.0 + beta * bonus
    return out


def _inputs(seed, b, t, d, v):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(b, t, d)).astype(np.float32)
    w = (rng.normal(size=(v, d)) * 0.5).astype(np.float32)
    y = rng.integers(0, v, (b, t)).astype(np.int32)
    m = rng.random((b, t)) < 0.7
    m[0] = False  # a fully masked row
    if t > 1:
        m[-1] = False
        m[-1, 0] = True  # a length-1 response
    return h, w, y, m


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize(
    "shape,chunk", [((3, 5, 4, 7), 3), ((4, 6, 8, 16), 16), ((2, 1, 5, 11), 4), ((3, 4, 6, 9), 64)]
)
def test_chunked_grads_match_the_unchunked_formula(shape, chunk):
    h, w, y, m = _inputs(sum(shape), *shape)
    got = gar.output_error_grads(h, w, y, m, chunk=chunk)
    np.testing.assert_allclose(got, _ref_grads(h, w, y, m), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", gar.VARIANTS)
@pytest.mark.parametrize("chunk", [1, 5, 13])
def test_signatures_match_the_reference(variant, chunk):
    h, w, y, m = _inputs(7, 4, 6, 5, 13)
    got = gar.gar_signatures(h, w, y, m, variant=variant, chunk=chunk)
    np.testing.assert_allclose(got, _ref_sig(h, w, y, m, variant), rtol=1e-6, atol=1e-6)
    assert np.all(np.asarray(got[0]) == 0)  # fully masked row: exactly 0, no NaN


def test_hand_computed_gradient():
    # V = 2, D = 1, W = [[1], [-1]], h = 0: p = (.5, .5); y = 0: δ = (-.5, .5), g = -.5 - .5 = -1.
    # h = ln 3 / 2: logits (ln3/2, -ln3/2), p = (.75, .25); y = 1: δ = (.75, -.75), g = 1.5.
    w = np.array([[1.0], [-1.0]], np.float32)
    h = np.array([[[0.0], [np.log(3.0) / 2]]], np.float32)
    y = np.array([[0, 1]], np.int32)
    g = gar.output_error_grads(h, w, y, np.ones((1, 2), bool), chunk=1)
    np.testing.assert_allclose(g[0, :, 0], [-1.0, 1.5], rtol=1e-6)
    # Signature grad_hidden: Σ g⊙h = 1.5·ln3/2 > 0 → +1; grad: -1 + 1.5 > 0 → +1.
    s = gar.gar_signatures(h, w, y, np.ones((1, 2), bool), variant="grad")
    np.testing.assert_allclose(s, [[1.0]])


def test_masked_positions_may_hold_garbage():
    h, w, y, m = _inputs(3, 3, 5, 4, 6)
    h_bad = np.where(m[..., None], h, np.nan).astype(np.float32)
    y_bad = np.where(m, y, 0)
    a = gar.gar_signatures(h, w, y, m)
    b = gar.gar_signatures(h_bad, w, y_bad, m)
    np.testing.assert_array_equal(a, b)


def test_jit_with_static_chunk_has_no_vocab_sized_temporaries():
    b, t, d, v, chunk = 2, 8, 4, 4096, 64
    h, w, y, m = _inputs(0, b, t, d, v)
    fn = jax.jit(lambda *a: gar.output_error_grads(*a, chunk=chunk))
    hlo = fn.lower(h, w, y, m).as_text()
    assert f"{b},{t},{v}" not in hlo.replace("x", ",")  # no [B, T, V] array anywhere
    np.testing.assert_allclose(fn(h, w, y, m), _ref_grads(h, w, y, m), rtol=1e-5, atol=1e-6)


def _ref_aggregate_bonus(real, aux, how, w):
    """The reference's `_aggregate_bonus` (None = no anchor of that kind)."""
    if real is None:
        return aux
    if aux is None or how == "real_only":
        return real
    if how == "aux_max":
        return max(real, w * aux)
    return real + w * max(0.0, aux - real)


def test_anchor_alignment_matches_the_reference_rule():
    rng = np.random.default_rng(1)
    b, k, j, d = 6, 3, 2, 4
    sig = rng.normal(size=(b, d)).astype(np.float32)
    anchors = rng.normal(size=(b, k, d)).astype(np.float32)
    aux = rng.normal(size=(b, j, d)).astype(np.float32)
    am = rng.random((b, k)) < 0.6
    am[0] = False  # aux only
    am[2] = True
    xm = rng.random((b, j)) < 0.7
    xm[1] = False  # real only
    xm[2] = True
    am[5], xm[5] = False, False  # neither
    cos = lambda u, v: float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
    for how, w in (
        ("aux_residual", 0.5),
        ("aux_residual", 1.0),
        ("aux_max", 0.5),
        ("real_only", 0.5),
    ):
        got, has = gar.anchor_alignment(
            sig, anchors, am, aux_BxJxD=aux, aux_mask_BxJ=xm, aux_weight=w, aux_combine=how
        )
        for i in range(b):
            p = [cos(sig[i], anchors[i, q]) for q in range(k) if am[i, q]]
            a = [cos(sig[i], aux[i, q]) for q in range(j) if xm[i, q]]
            if how == "real_only":
                a = []
            want = _ref_aggregate_bonus(max(p) if p else None, max(a) if a else None, how, w)
            assert bool(has[i]) == (want is not None), (how, i)
            np.testing.assert_allclose(got[i], want or 0.0, rtol=1e-6, atol=1e-6)
    # Row 2 has both kinds: the residual lifts it exactly when its aux cosine is higher.
    real = max(cos(sig[2], anchors[2, q]) for q in range(k))
    best_aux = max(cos(sig[2], aux[2, q]) for q in range(j))
    got, _ = gar.anchor_alignment(sig, anchors, am, aux_BxJxD=aux, aux_mask_BxJ=xm)
    np.testing.assert_allclose(got[2], real + 0.5 * max(0.0, best_aux - real), rtol=1e-6)
    # Without aux: plain max over anchors, 0 with no anchor.
    got, has = gar.anchor_alignment(sig, anchors, am)
    assert got[0] == 0 and not has[0]
    with pytest.raises(ValueError, match="aux_residual"):
        gar.anchor_alignment(sig, anchors, am, aux_BxJxD=aux, aux_mask_BxJ=xm, aux_combine="mean")


def test_rewards_match_reference_on_random_groups():
    rng = np.random.default_rng(2)
    for b, g in ((12, 3), (7, 4), (16, 2)):
        align = rng.uniform(-1, 1, b).astype(np.float32)
        passed = rng.random(b) < 0.6
        groups = rng.integers(0, g, b).astype(np.int32)
        anchored = rng.random(b) < 0.8
        for min_group in (1, 2, 3):
            got = _rewards(
                align, passed, groups, g, beta=0.5, min_group=min_group, has_anchor_B=anchored
            )
            want = _ref_rewards(align, passed, groups, 0.5, anchored, min_group)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_rewards_hand_computed_and_edge_cases():
    # One group, a = (.2, .6, -1 (failed), .4) → mean over passing = .4; bonus (0, .2, -, 0).
    r = gar.gar_rewards(
        np.array([0.2, 0.6, -1.0, 0.4]), np.array([1, 1, 0, 1], bool), np.zeros(4, np.int32), 1
    )
    np.testing.assert_allclose(r, [1.0, 1.1, 0.0, 1.0], rtol=1e-6)
    # A lone passing rollout: its absolute alignment (reference), or no bonus (min_group 1).
    one = (np.array([0.2, 0.6, -1.0, 0.4]), np.array([0, 1, 0, 0], bool), np.zeros(4, np.int32))
    np.testing.assert_allclose(gar.gar_rewards(*one, 1), [0, 1.3, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(gar.gar_rewards(*one, 1, min_group=1), [0, 1.0, 0, 0])
    groups = np.array([0, 0, 1, 1], np.int32)
    # All wrong → 0; all correct with equal alignment (zero variance) → exactly 1.
    assert np.all(np.asarray(gar.gar_rewards(np.ones(4), np.zeros(4, bool), groups, 2)) == 0)
    r = gar.gar_rewards(np.full(4, 0.3), np.ones(4, bool), groups, 2)
    assert np.all(np.asarray(r) == 1.0)
    # Invalid rows get 0 and count in no mean.
    r = gar.gar_rewards(
        np.array([0.0, 1.0, 0.5, 0.9]),
        np.ones(4, bool),
        groups,
        2,
        valid_B=np.array([True, False, True, True]),
    )
    np.testing.assert_allclose(r, [1.0, 0.0, 1.0, 1.1], rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 2.0))
def test_reward_invariants(seed, beta):
    rng = np.random.default_rng(seed)
    b = 10
    align = rng.uniform(-1, 1, b).astype(np.float32)
    passed = rng.random(b) < 0.5
    groups = rng.integers(0, 3, b).astype(np.int32)
    r = np.asarray(_rewards(align, passed, groups, 3, beta=beta))
    assert np.all(r[~passed] == 0)
    assert np.all((r[passed] >= 1.0) & (r[passed] <= 1.0 + 2 * beta + 1e-6))
    # The best-aligned passing rollout of each group gets the largest reward of the group.
    for g in range(3):
        idx = np.flatnonzero(passed & (groups == g))
        if idx.size:
            assert r[idx[np.argmax(align[idx])]] == r[idx].max()


def _flat_grad(h, w, y, m):
    """G = Σ_t δ_t h_tᵀ, flattened, in float64."""
    w64 = w.astype(np.float64)
    out = np.zeros(w.shape)
    for j in range(h.shape[0]):
        if m[j]:
            logits = w64 @ h[j]
            p = np.exp(logits - logits.max())
            p /= p.sum()
            p[y[j]] -= 1.0
            out += np.outer(p, h[j])
    return out.ravel()


@pytest.mark.parametrize("chunk", [3, 32])
def test_cosine_decomposition_is_exact(chunk):
    rng = np.random.default_rng(5)
    b, t, s, d, v = 3, 4, 5, 6, 10
    h, w, y, m = _inputs(5, b, t, d, v)
    m[0, :2] = True  # row 0 not empty here
    ha = rng.normal(size=(b, s, d)).astype(np.float32)
    ya = rng.integers(0, v, (b, s)).astype(np.int32)
    ma = rng.random((b, s)) < 0.8
    ma[:, 0] = True
    out = _decomposition(h, y, m, ha, ya, ma, w, chunk=chunk)
    for i in range(b):
        g1, g2 = _flat_grad(h[i], w, y[i], m[i]), _flat_grad(ha[i], w, ya[i], ma[i])
        want = g1 @ g2 / np.linalg.norm(g1) / np.linalg.norm(g2)
        np.testing.assert_allclose(out["cos_B"][i], want, rtol=1e-5, atol=1e-6)
    # The identity cos = Σ ω · cos_err · cos_act holds term by term.
    recon = np.sum(
        np.asarray(out["weight_BxTxS"])
        * np.asarray(out["error_cos_BxTxS"])
        * np.asarray(out["activation_cos_BxTxS"]),
        (1, 2),
    )
    np.testing.assert_allclose(recon, out["cos_B"], rtol=1e-5, atol=1e-6)


def test_cosine_decomposition_single_token_is_a_product():
    rng = np.random.default_rng(6)
    d, v = 5, 7
    h, ha = rng.normal(size=(2, 1, 1, d)).astype(np.float32)
    w = rng.normal(size=(v, d)).astype(np.float32)
    y, ya = np.array([[1]]), np.array([[4]])
    one = np.ones((1, 1), bool)
    out = _decomposition(h, y, one, ha, ya, one, w, chunk=2)
    np.testing.assert_allclose(
        out["cos_B"], out["error_factor_B"] * out["activation_factor_B"], rtol=1e-5
    )
    cos_h = float(h[0, 0] @ ha[0, 0] / np.linalg.norm(h) / np.linalg.norm(ha))
    np.testing.assert_allclose(out["activation_factor_B"], [cos_h], rtol=1e-5)
