"""The sampling step kernel: top-k/top-p filtering, sampling, log-probs and entropy vs NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.sampling import filter_logits, sample_step

# One shape for every small-batch test, so each jitted kernel compiles once.
B, V = 8, 16
# Distribution test: many identical rows over a small vocabulary.
DRAWS, SMALL_V = 4000, 6

_filter = jax.jit(filter_logits)
_step = jax.jit(sample_step)


# ----------------------------------------------------------- NumPy references
def ref_keep(scaled_V, k, p, p_slack=0.0):
    """Kept set of top-k then top-p, in float64, written from the definition.

    Top-k (k = 0 or k >= V: off) keeps the k largest logits. Top-p (p = 1: off)
    then keeps the smallest set of most likely tokens, under the distribution
    renormalised over the top-k set, whose mass reaches p; the top token is
    always kept. `p_slack` widens p (a superset, for float-rounding tolerance).
    """
    v = scaled_V.shape[0]
    order = np.argsort(-scaled_V.astype(np.float64), kind="stable")
    kk = v if k <= 0 or k >= v else k
    n_keep = kk
    if p < 1.0:
        top = scaled_V[order[:kk]].astype(np.float64)
        prob = np.exp(top - top.max())
        prob /= prob.sum()
        cum = np.cumsum(prob)
        # Tokens before (and including) the first one at which the mass reaches p.
        n_keep = min(kk, int(np.sum(cum < p + p_slack)) + 1)
    keep = np.zeros(v, bool)
    keep[order[:n_keep]] = True
    return keep


def top_p_margin(scaled_V, k, p):
    """Distance of p from the nearest cumulative mass (small = rounding could flip the set)."""
    v = scaled_V.shape[0]
    kk = v if k <= 0 or k >= v else k
    top = np.sort(scaled_V.astype(np.float64))[::-1][:kk]
    prob = np.exp(top - top.max())
    cum = np.cumsum(prob / prob.sum())
    return np.min(np.abs(cum - p))


def ref_sampling_logp(logits_V, temperature, k, p):
    """log of the temperature-scaled, filtered, renormalised distribution (-inf outside)."""
    scaled = logits_V.astype(np.float64) / temperature
    keep = ref_keep(scaled, k, p)
    z = np.where(keep, scaled - scaled[keep].max(), -np.inf)
    return z - np.log(np.sum(np.exp(z)))


def log_softmax(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), -1, keepdims=True))


def _random_case(seed, scale=2.0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(B, V)) * scale).astype(np.float32)
    k = rng.choice([0, 0, 1, 3, 7, V, V + 5], size=B).astype(np.int32)
    p = rng.choice([1.0, 1.0, 0.3, 0.6, 0.9, 0.95], size=B).astype(np.float32)
    return logits, k, p


def _call_step(key, logits, temp, k, p):
    out = _step(key, jnp.asarray(logits), jnp.asarray(temp), jnp.asarray(k), jnp.asarray(p))
    return tuple(np.asarray(x) for x in out)


# ------------------------------------------------------------------- filtering
@pytest.mark.parametrize("seed", range(4))
def test_filter_logits_matches_numpy_reference(seed):
    logits, k, p = _random_case(seed)
    # Keep p away from cumulative-mass boundaries so float32 vs float64 cannot flip a token.
    for b in range(B):
        assert p[b] == 1.0 or top_p_margin(logits[b], k[b], p[b]) > 1e-4
    out = np.asarray(_filter(jnp.asarray(logits), jnp.asarray(k), jnp.asarray(p)))
    for b in range(B):
        keep = ref_keep(logits[b], k[b], p[b])
        np.testing.assert_array_equal(np.isfinite(out[b]), keep, err_msg=f"row {b}")
        # Kept logits pass through unchanged; filtered ones are exactly -inf.
        np.testing.assert_array_equal(out[b][keep], logits[b][keep])
        assert np.all(out[b][~keep] == -np.inf)


def test_filter_hand_computed():
    # probs of [log .5, log .3, log .15, log .05]: cumulative .5 .8 .95 1.
    row = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    # Tokens 4.. have probability 0 (they stay -inf whatever is kept).
    logits = np.full((B, V), -np.inf, np.float32)
    logits[:, :4] = row[[2, 0, 3, 1]]  # scrambled order: token 1 is best, then 3, 0, 2
    cases = [  # (k, p, expected kept tokens)
        (0, 1.0, {0, 1, 2, 3}),
        (1, 1.0, {1}),
        (2, 1.0, {1, 3}),
        (0, 0.4, {1}),  # the top token alone reaches 0.4
        (0, 0.7, {1, 3}),
        (0, 0.9, {1, 3, 0}),
        (2, 0.7, {1, 3}),  # top-2 renormalised: .625, .375 -> 0.7 needs both
        (2, 0.6, {1}),  # 0.625 >= 0.6
    ]
    k = np.array([c[0] for c in cases], np.int32)
    p = np.array([c[1] for c in cases], np.float32)
    out = np.asarray(_filter(jnp.asarray(logits), jnp.asarray(k), jnp.asarray(p)))
    for b, (_, _, want) in enumerate(cases):
        assert set(np.flatnonzero(np.isfinite(out[b])).tolist()) == want, cases[b]


def test_top_p_one_keeps_every_token():
    logits = np.zeros((B, V), np.float32)
    logits[:, 0] = 30.0  # p(token 0) rounds to 1 in float32; the rest are ~1e-13 each
    k = np.zeros(B, np.int32)
    k[1] = 2  # another row asks for top-k, so the filter runs for the whole batch
    p = np.ones(B, np.float32)
    out = np.asarray(_filter(jnp.asarray(logits), jnp.asarray(k), jnp.asarray(p)))
    np.testing.assert_array_equal(out[0], logits[0])


# --------------------------------------------------------------- sample_step
temperatures = st.one_of(st.just(0.0), st.floats(0.05, 3.0))
top_ks = st.sampled_from([0, 1, 2, 5, V - 1, V, V + 3])
top_ps = st.one_of(st.just(1.0), st.floats(0.01, 1.0))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.1, 8.0),
    temp=st.lists(temperatures, min_size=B, max_size=B),
    k=st.lists(top_ks, min_size=B, max_size=B),
    p=st.lists(top_ps, min_size=B, max_size=B),
    key_seed=st.integers(0, 2**31 - 1),
)
def test_sampled_token_is_in_allowed_set(seed, scale, temp, k, p, key_seed):
    logits = (np.random.default_rng(seed).normal(size=(B, V)) * scale).astype(np.float32)
    temp, k, p = np.float32(temp), np.int32(k), np.float32(p)
    tok, logp, slogp, ent = _call_step(jax.random.key(key_seed), logits, temp, k, p)
    assert tok.dtype == np.int32
    for b in range(B):
        if temp[b] == 0:
            assert tok[b] == np.argmax(logits[b])
            assert slogp[b] == 0.0
        else:
            # A slightly widened nucleus: float32 rounding may only add the boundary token.
            # (The reference scales in float32 like the kernel, then works in float64.)
            allowed = ref_keep(logits[b] / temp[b], k[b], p[b], p_slack=1e-5)
            assert allowed[tok[b]], (b, tok[b], np.flatnonzero(allowed))
            assert np.isfinite(slogp[b]) and slogp[b] <= 1e-6
    want = log_softmax(logits)[np.arange(B), tok]
    np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(ent)) and np.all(ent >= -1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_step_logps_and_entropy_match_numpy(seed):
    logits, k, p = _random_case(seed + 10)
    temp = np.random.default_rng(seed).choice([0.0, 0.5, 1.0, 1.7], size=B).astype(np.float32)
    for b in range(B):
        if p[b] < 1 and temp[b] > 0:
            assert top_p_margin(logits[b] / temp[b], k[b], p[b]) > 1e-4
    tok, logp, slogp, ent = _call_step(jax.random.key(seed), logits, temp, k, p)
    lsm = log_softmax(logits)
    # logp: temperature-1, unfiltered model log-prob of the chosen token.
    np.testing.assert_allclose(logp, lsm[np.arange(B), tok], atol=1e-5)
    # entropy of softmax(logits), independent of temperature and filters.
    np.testing.assert_allclose(ent, -np.sum(np.exp(lsm) * lsm, -1), atol=1e-5)
    for b in range(B):
        if temp[b] == 0:
            assert tok[b] == np.argmax(logits[b]) and slogp[b] == 0.0
        else:
            want = ref_sampling_logp(logits[b], temp[b], k[b], p[b])[tok[b]]
            np.testing.assert_allclose(slogp[b], want, atol=1e-5, err_msg=f"row {b}")


def test_step_top_k_one_is_argmax_with_zero_sampling_logp():
    logits, _, _ = _random_case(3)
    temp = np.full(B, 2.5, np.float32)
    tok, logp, slogp, _ = _call_step(
        jax.random.key(0), logits, temp, np.ones(B, np.int32), np.ones(B, np.float32)
    )
    np.testing.assert_array_equal(tok, np.argmax(logits, -1))
    np.testing.assert_allclose(slogp, 0.0, atol=1e-6)
    np.testing.assert_allclose(logp, np.max(log_softmax(logits), -1), atol=1e-5)


def test_step_row_results_do_not_depend_on_other_rows():
    # Filtering runs for the whole batch if any row asks for it; unfiltered rows
    # must come out the same either way (same key: same Gumbel noise per row).
    logits, _, _ = _random_case(5, scale=1.0)
    temp = np.full(B, 0.8, np.float32)
    p = np.ones(B, np.float32)
    k_off = np.zeros(B, np.int32)
    k_mixed = k_off.copy()
    k_mixed[0] = 2
    key = jax.random.key(7)
    off = _call_step(key, logits, temp, k_off, p)
    mixed = _call_step(key, logits, temp, k_mixed, p)
    for a, b in zip(off, mixed, strict=True):
        np.testing.assert_allclose(a[1:], b[1:], atol=1e-6)


def test_step_determinism():
    logits = np.tile(np.random.default_rng(0).normal(size=(1, V)).astype(np.float32), (B, 1))
    temp, k, p = np.ones(B, np.float32), np.zeros(B, np.int32), np.ones(B, np.float32)
    a = _call_step(jax.random.key(1), logits, temp, k, p)
    b = _call_step(jax.random.key(1), logits, temp, k, p)
    c = _call_step(jax.random.key(2), logits, temp, k, p)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    # Identical rows get independent draws.
    assert len(set(a[0].tolist())) > 1


# -------------------------------------------------------------- distribution
DIST_LOGITS = np.array([2.0, 1.4, 1.0, 0.3, -0.5, -1.2], np.float32)


@pytest.mark.parametrize(
    "temperature,k,p",
    [(1.0, 0, 1.0), (0.6, 0, 1.0), (1.8, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.8), (0.7, 4, 0.9)],
)
def test_empirical_distribution_matches_reference(temperature, k, p):
    logits = np.tile(DIST_LOGITS, (DRAWS, 1))
    ref_lp = ref_sampling_logp(DIST_LOGITS, temperature, k, p)
    ref_prob = np.exp(ref_lp)
    assert top_p_margin(DIST_LOGITS / temperature, k, p) > 1e-3 or p == 1.0
    tok, logp, slogp, _ = _call_step(
        jax.random.key(123),
        logits,
        np.full(DRAWS, temperature, np.float32),
        np.full(DRAWS, k, np.int32),
        np.full(DRAWS, p, np.float32),
    )
    freq = np.bincount(tok, minlength=SMALL_V) / DRAWS
    # Filtered tokens are never drawn; the rest within 5 standard errors.
    assert np.all(freq[ref_prob == 0] == 0), freq
    stderr = np.sqrt(ref_prob * (1 - ref_prob) / DRAWS)
    assert np.all(np.abs(freq - ref_prob) <= 5 * stderr + 1e-9), (freq, ref_prob)
    assert np.max(np.abs(freq - ref_prob)) < 0.03
    # Every draw reports its probabilities under both distributions.
    np.testing.assert_allclose(slogp, ref_lp[tok], atol=1e-5)
    np.testing.assert_allclose(logp, log_softmax(DIST_LOGITS)[tok], atol=1e-5)
