"""DASH: divergence-adaptive supervision horizons for on-policy self-distillation.

OPSD gives every sampled token the local signal d_t = ℓ^T_t − ℓ^S_t, the
log-prob of the sampled token under the policy with privileged context (the
self-teacher) minus under the plain prompt (stop-gradient: both come from the
score stage). DASH (seeds: "DASH: Divergence-Adaptive Supervision Horizons")
maps the gap between d_t and its sequence mean to a propagation gate and uses
it for backward multi-step aggregation, so a token's weight depends on how the
divergence evolves after it. Fixed by the abstract: gap = d_t − mean_t d (over
the row's response), a gate from the gap, backward aggregation, no extra
forward passes. Ours (docs/methods.md):

  gate_t = 2·σ(κ·|d_t − mean d|) − 1 ∈ [0, 1)
  H_t    = H_min + round(gate_t · (H_max − H_min))
  a_t    = Σ_{k=0}^{H_t−1} γ^k d_{t+k}

where t + k steps over the row's response tokens (masked gaps are skipped, as
in `advantages.gae`) and the sum stops at the end of the response. A large gap
(a token whose divergence departs from the sequence's typical level) gets a
long horizon: its credit includes the divergences it leads to. H_min = 1 with
κ → 0 gives plain OPSD (a_t = d_t). Cost O(T·H_max): H_max shifted adds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_F32 = jnp.float32


def _compact(x_BxT, rank_BxT, m):
    """Moves each row's masked-in entries to the front, in order (zeros after)."""
    b, t = x_BxT.shape
    rows = jnp.arange(b)[:, None]
    cols = jnp.where(m, rank_BxT, t)  # masked entries go to an out-of-range column: dropped
    return jnp.zeros((b, t), x_BxT.dtype).at[rows, cols].set(x_BxT, mode="drop")


def dash_horizons(signal_BxT, mask_BxT, *, h_min=1, h_max=8, kappa=1.0):
    """Gap, gate and horizon per token (see module doc).

    Args:
      signal_BxT: [B, T] d_t = ℓ^T − ℓ^S.
      mask_BxT: [B, T] bool response/loss mask.
      h_min, h_max: static ints 1 ≤ H_min ≤ H_max (ours: 1, 8).
      kappa: gate slope κ on |gap| in nats (ours: 1).
    Returns:
      (gap_BxT, gate_BxT, horizon_BxT): float32, float32, int32; 0 at masked positions.
    """
    if not 1 <= h_min <= h_max:
        raise ValueError(f"dash: need 1 <= h_min <= h_max, got h_min={h_min}, h_max={h_max}")
    m = jnp.asarray(mask_BxT) != 0
    d = jnp.where(m, jnp.asarray(signal_BxT, _F32), 0.0)
    n_B = jnp.maximum(m.sum(-1), 1).astype(_F32)
    gap = jnp.where(m, d - (d.sum(-1) / n_B)[:, None], 0.0)
    gate = jnp.where(m, 2.0 * jax.nn.sigmoid(kappa * jnp.abs(gap)) - 1.0, 0.0)
    horizon = h_min + jnp.round(gate * (h_max - h_min)).astype(jnp.int32)
    return gap, gate, jnp.where(m, horizon, 0)


def dash_aggregate(signal_BxT, horizon_BxT, mask_BxT, *, gamma=0.9, h_max=8):
    """Backward aggregation a_t = Σ_{k<H_t} γ^k d_{t+k} over each row's masked-in tokens.

    Args:
      signal_BxT: [B, T] per-token signal d_t.
      horizon_BxT: [B, T] int horizons H_t (≤ h_max).
      mask_BxT: [B, T] bool; k counts masked-in tokens (gaps are skipped).
      gamma: discount γ (ours: 0.9).
      h_max: static bound on the horizons (the number of shifted adds).
    Returns:
      a_BxT: float32 [B, T], 0 at masked positions.
    """
    m = jnp.asarray(mask_BxT) != 0
    d = jnp.where(m, jnp.asarray(signal_BxT, _F32), 0.0)
    rank = jnp.cumsum(m.astype(jnp.int32), axis=-1) - 1
    d_c = _compact(d, rank, m)  # zero past each row's response: the sum stops there
    h_c = _compact(jnp.asarray(horizon_BxT, jnp.int32), rank, m)
    t = d.shape[1]
    padded = jnp.pad(d_c, ((0, 0), (0, h_max)))
    a_c = jnp.zeros_like(d_c)
    for k in range(h_max):  # static and small: H_max shifted adds, O(T·H_max)
        a_c = a_c + jnp.where(k < h_c, gamma**k * padded[:, k : k + t], 0.0)
    a = jnp.take_along_axis(a_c, jnp.where(m, rank, 0), axis=1)
    return jnp.where(m, a, 0.0)


def dash_advantages(
    teacher_logps_BxT, student_logps_BxT, mask_BxT, *, gamma=0.9, h_min=1, h_max=8, kappa=1.0
):
    """DASH token advantages from the self-teacher and student log-probs.

    Args:
      teacher_logps_BxT: [B, T] ℓ^T, log-prob of each sampled token under the
        policy with privileged context (stop-gradient).
      student_logps_BxT: [B, T] ℓ^S under the plain prompt (π_old, stop-gradient).
      mask_BxT: [B, T] bool response/loss mask.
      gamma, h_min, h_max, kappa: see `dash_horizons` and `dash_aggregate`.
    Returns:
      (adv_BxT, horizon_BxT): float32 a_t and int32 H_t, 0 at masked positions.
    """
    m = jnp.asarray(mask_BxT) != 0
    # Masked positions may hold -inf/NaN padding: zero them before subtracting.
    d = jnp.where(m, jnp.asarray(teacher_logps_BxT, _F32), 0.0) - jnp.where(
        m, jnp.asarray(student_logps_BxT, _F32), 0.0
    )
    _, _, horizon = dash_horizons(d, m, h_min=h_min, h_max=h_max, kappa=kappa)
    return dash_aggregate(d, horizon, m, gamma=gamma, h_max=h_max), horizon
