"""Categorical critics: HL-Gauss targets and controls, cross-entropy, decoded value, calibration.

A categorical critic predicts logits over M fixed bins of [v_min, v_max]
(edges linspace(v_min, v_max, M + 1), centres their midpoints: the support of
`rlvr_jax.models.heads.CategoricalValueHead.support`, which `support` returns).
It is trained by cross-entropy to a target distribution built from the scalar
regression target y (a return R_t):

  "hl_gauss" (Imani & White 2018; Farebrother et al. 2024): the mass of
      N(y, σ²) on each bin, truncated to the support and renormalised,
      σ = σ_ratio · bin width (σ_ratio = .75);
  "two_hot": linear interpolation between the two centres around y;
  "one_hot": all mass on the bin that contains y;
  "bernoulli": two bins whose values are v_min and v_max, with
      P(v_max) = (y − v_min)/(v_max − v_min) (a success-probability critic).

Targets outside the support are clipped to it first (ours: a value function of
a bounded reward cannot leave it, and clipping keeps the truncated Gaussian's
normaliser away from 0). The decoded value is the expectation of the bin
values under softmax(logits). Brier score and expected calibration error
measure a critic that predicts a success probability.

The update stage's critic loss calls `cross_entropy` on `targets(...)`; the
evaluate stage calls `brier_score` / `expected_calibration_error`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.models.heads import CategoricalValueHead

KINDS = ("hl_gauss", "two_hot", "one_hot", "bernoulli")

_F32 = jnp.float32


def support(num_bins: int, v_min: float, v_max: float):
    """(edges [M + 1], centres [M]) float32 NumPy arrays: `CategoricalValueHead.support`."""
    return CategoricalValueHead.support(num_bins, v_min, v_max)


def bin_values(kind: str, num_bins: int, v_min: float, v_max: float) -> np.ndarray:
    """The value each bin stands for: the centres, or (v_min, v_max) for "bernoulli".

    Args:
      kind: one of KINDS.
      num_bins: M (ignored for "bernoulli", which has 2 bins).
      v_min, v_max: the support.
    Returns:
      float32 NumPy array [M] (or [2]).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown categorical target kind {kind!r}; valid: {KINDS}")
    if kind == "bernoulli":
        support(2, v_min, v_max)  # validates the range
        return np.array([v_min, v_max], np.float32)
    return support(num_bins, v_min, v_max)[1]


def hl_gauss_targets(values, edges, *, sigma_ratio=0.75):
    """HL-Gauss target distribution: N(y, σ²) integrated over each bin, truncated to the support.

    p_m = (Φ((e_{m+1} − y)/σ) − Φ((e_m − y)/σ)) / (Φ((e_M − y)/σ) − Φ((e_0 − y)/σ)),
    σ = sigma_ratio · (e_M − e_0)/M, with y clipped to [e_0, e_M].

    Args:
      values: targets y, any shape [...].
      edges: [M + 1] increasing, equally spaced bin edges (from `support`).
      sigma_ratio: σ in bin widths (.75, Farebrother et al.).
    Returns:
      probs [..., M] float32, each row summing to 1.
    """
    edges = jnp.asarray(edges, _F32)
    y = jnp.clip(jnp.asarray(values, _F32), edges[0], edges[-1])[..., None]
    sigma = sigma_ratio * (edges[-1] - edges[0]) / (edges.shape[0] - 1)
    cdf = jax.scipy.special.erf((edges - y) / (jnp.sqrt(2.0) * sigma))  # 2Φ − 1, [..., M + 1]
    mass = cdf[..., 1:] - cdf[..., :-1]
    return mass / (cdf[..., -1:] - cdf[..., :1])


def two_hot_targets(values, centers):
    """Two-hot: y between centres c_k ≤ y ≤ c_{k+1} gets (c_{k+1} − y, y − c_k)/Δ on (k, k+1).

    Args:
      values: targets y [...], clipped to [c_0, c_{M−1}].
      centers: [M] increasing, equally spaced centres.
    Returns:
      probs [..., M] float32 whose expectation over the centres is the clipped y.
    """
    c = jnp.asarray(centers, _F32)
    y = jnp.clip(jnp.asarray(values, _F32), c[0], c[-1])
    width = (c[-1] - c[0]) / (c.shape[0] - 1)
    # Triangular kernel: weight 1 − |y − c_m|/Δ on the (at most two) centres within Δ.
    return jnp.maximum(1.0 - jnp.abs(y[..., None] - c) / width, 0.0)


def one_hot_targets(values, edges):
    """One-hot on the bin [e_m, e_{m+1}) containing y (the last bin is closed; y clipped).

    Args:
      values: targets y [...].
      edges: [M + 1] bin edges.
    Returns:
      probs [..., M] float32.
    """
    edges = jnp.asarray(edges, _F32)
    m = edges.shape[0] - 1
    idx = jnp.clip(jnp.searchsorted(edges, jnp.asarray(values, _F32), side="right") - 1, 0, m - 1)
    return jax.nn.one_hot(idx, m, dtype=_F32)


def bernoulli_targets(values, v_min, v_max):
    """Two bins valued (v_min, v_max): (1 − q, q) with q = clip((y − v_min)/(v_max − v_min), 0, 1).

    Args:
      values: targets y [...].
      v_min, v_max: the two outcomes (e.g. 0 and 1 for a pass/fail reward).
    Returns:
      probs [..., 2] float32.
    """
    q = jnp.clip((jnp.asarray(values, _F32) - v_min) / (v_max - v_min), 0.0, 1.0)
    return jnp.stack([1.0 - q, q], -1)


def targets(values, kind: str, *, num_bins: int, v_min: float, v_max: float, sigma_ratio=0.75):
    """The target distribution of `kind` (one of KINDS) on the support of (num_bins, v_min, v_max).

    Args:
      values: targets y [...].
      kind: static, one of KINDS.
      num_bins, v_min, v_max: the support (num_bins is ignored by "bernoulli").
      sigma_ratio: σ / bin width for "hl_gauss".
    Returns:
      probs [..., M] (or [..., 2]) float32.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown categorical target kind {kind!r}; valid: {KINDS}")
    if kind == "bernoulli":
        return bernoulli_targets(values, v_min, v_max)
    edges, centers = support(num_bins, v_min, v_max)
    if kind == "hl_gauss":
        return hl_gauss_targets(values, edges, sigma_ratio=sigma_ratio)
    if kind == "two_hot":
        return two_hot_targets(values, centers)
    return one_hot_targets(values, edges)


def cross_entropy(logits_BxTxM, target_probs_BxTxM, mask_BxT):
    """Per-position cross-entropy −Σ_m p_m log softmax(logits)_m, 0 off the mask.

    Args:
      logits_BxTxM: critic logits (any float dtype).
      target_probs_BxTxM: target distributions (e.g. from `targets`).
      mask_BxT: bool/{0,1} positions that train.
    Returns:
      loss_BxT float32 (reduce with `rlvr_jax.core.losses.aggregate`).
    """
    m = jnp.asarray(mask_BxT) != 0
    logp = jax.nn.log_softmax(jnp.where(m[..., None], jnp.asarray(logits_BxTxM, _F32), 0.0), -1)
    p = jnp.where(m[..., None], jnp.asarray(target_probs_BxTxM, _F32), 0.0)
    return jnp.where(m, -jnp.sum(p * logp, -1), 0.0)


def decode_value(logits_BxTxM, bin_values_M):
    """Expected value Σ_m softmax(logits)_m · v_m.

    Computed as offsets from the support's midpoint (as the value head does) so
    f32 rounding of Σ p cannot push the value outside [v_0, v_{M−1}] by |v|·ulp.

    Args:
      logits_BxTxM: logits over bins (any leading shape).
      bin_values_M: the bins' values (`bin_values`).
    Returns:
      values_BxT float32.
    """
    v = jnp.asarray(bin_values_M, _F32)
    mid = 0.5 * (v[0] + v[-1])
    probs = jax.nn.softmax(jnp.asarray(logits_BxTxM, _F32), -1)
    return mid + jnp.sum(probs * (v - mid), -1)


def brier_score(prob_N, outcome_N, mask_N):
    """Mean squared error (p − o)² of predicted success probabilities over the masked entries.

    For a critic of a pass/fail reward, p = (V − v_min)/(v_max − v_min).

    Args:
      prob_N: predicted probabilities, any shape.
      outcome_N: outcomes in {0, 1} (or targets in [0, 1]), same shape.
      mask_N: bool/{0,1}, entries that count.
    Returns:
      float32 scalar; 0 when nothing is masked in.
    """
    m = jnp.asarray(mask_N) != 0
    err = jnp.where(m, jnp.asarray(prob_N, _F32) - jnp.asarray(outcome_N, _F32), 0.0)
    return jnp.sum(err * err) / jnp.maximum(m.sum(), 1)


def expected_calibration_error(prob_N, outcome_N, mask_N, *, num_bins: int = 10):
    """ECE = Σ_b (n_b / N) · |mean outcome_b − mean prob_b| over equal-width probability bins.

    Bin b holds p in [b/K, (b+1)/K) (the last bin includes 1); p is clipped to [0, 1].

    Args:
      prob_N, outcome_N, mask_N: as in `brier_score`.
      num_bins: K, static.
    Returns:
      float32 scalar in [0, 1]; 0 when nothing is masked in.
    """
    m = (jnp.asarray(mask_N) != 0).ravel()
    p = jnp.clip(jnp.asarray(prob_N, _F32).ravel(), 0.0, 1.0)
    o = jnp.asarray(outcome_N, _F32).ravel()
    idx = jnp.clip(jnp.floor(p * num_bins).astype(jnp.int32), 0, num_bins - 1)
    seg = lambda x: jax.ops.segment_sum(jnp.where(m, x, 0.0), idx, num_bins)
    n_b, p_b, o_b = seg(jnp.ones_like(p)), seg(p), seg(o)
    # Σ_b (n_b/N)|ō_b − p̄_b| = Σ_b |Σo − Σp| / N.
    return jnp.sum(jnp.abs(o_b - p_b)) / jnp.maximum(n_b.sum(), 1.0)
