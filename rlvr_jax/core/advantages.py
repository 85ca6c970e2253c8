"""Advantage estimators: group baselines (GRPO, Dr.GRPO, RLOO, REINFORCE++) and GAE.

Group layout: row b of the batch belongs to group `group_B[b]`, an int32 in
[0, num_groups); rows of a group may sit anywhere in the batch and groups may
have unequal sizes (G is per group). `valid_B` marks real rows: padded rows count
in no statistic and get advantage 0. Group statistics use `jax.ops.segment_sum`,
so nothing loops over rows; `num_groups` must be static under `jax.jit`. Ids
outside [0, num_groups) are not checked (jit cannot raise): mask such rows.

Zero-variance groups give advantage exactly 0 (not just ~1e-9/ε): r − mean is
computed from values shifted by their group's max, which also keeps it accurate
for rewards that differ by little. Every result is float32 and finite for empty
groups, all-masked rows, groups of size 1 and length-1 responses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

BASELINES = ("group", "none")


def _valid(valid_B, shape) -> jax.Array:
    if valid_B is None:
        return jnp.ones(shape, bool)
    return jnp.asarray(valid_B).astype(bool)


def _group_moments(values_B, group_B, num_groups, valid_B):
    """(r − mean_g r, mean, Bessel std, count) per row; deviations 0 on invalid rows.

    Values are shifted by their group's max before averaging: close values then
    subtract exactly (Sterbenz), so r − mean is accurate relative to the group's
    spread, not to |r| (rewards 1e-3 apart around 100 still match a float64
    reference to 1e-6), and constant groups give exactly 0.
    """
    values_B = jnp.asarray(values_B, jnp.float32)
    group_B = jnp.asarray(group_B, jnp.int32)
    seg = lambda x_B: jax.ops.segment_sum(x_B, group_B, num_segments=num_groups)
    count_G = seg(valid_B.astype(jnp.int32))
    n_G = count_G.astype(jnp.float32)
    max_G = jax.ops.segment_max(jnp.where(valid_B, values_B, -jnp.inf), group_B, num_groups)
    shift_G = jnp.where(count_G > 0, max_G, 0.0)
    shifted_B = jnp.where(valid_B, values_B - shift_G[group_B], 0.0)
    shifted_mean_G = seg(shifted_B) / jnp.maximum(n_G, 1.0)
    dev_B = jnp.where(valid_B, shifted_B - shifted_mean_G[group_B], 0.0)
    var_G = jnp.where(count_G > 1, seg(dev_B * dev_B) / jnp.maximum(n_G - 1.0, 1.0), 0.0)
    mean_G = shift_G + shifted_mean_G
    return dev_B, mean_G[group_B], jnp.sqrt(var_G)[group_B], count_G[group_B]


def group_stats(values_B, group_B, num_groups: int, valid_B=None):
    """Per-group mean, Bessel-corrected std and size, broadcast back to rows.

    Args:
      values_B: [B] values (rewards r), cast to float32.
      group_B: [B] int32 group ids in [0, num_groups).
      num_groups: static number of groups (some may be empty).
      valid_B: optional [B] bool; rows with False count in no statistic.
    Returns:
      (mean_B, std_B, count_B): float32, float32, int32 [B]: the statistics of
      row b's group over its valid rows (also filled in for invalid rows).
      std uses n − 1 (Bessel) and is 0 for groups of size ≤ 1; mean is 0 for
      groups with no valid row. A group whose valid values are all equal gets
      mean equal to that value exactly and std exactly 0.
    """
    valid_B = _valid(valid_B, jnp.shape(values_B))
    return _group_moments(values_B, group_B, num_groups, valid_B)[1:]


def grpo_advantages(
    rewards_B, group_B, num_groups: int, *, scale_by_std: bool = True, eps=1e-6, valid_B=None
):
    """GRPO: A_i = (r_i − mean_g r) / (std_g r + ε), std with Bessel correction.

    Args:
      rewards_B: [B] sequence rewards r_i (any real dtype).
      group_B: [B] int32 group ids in [0, num_groups).
      num_groups: static number of groups.
      scale_by_std: static; False gives r_i − mean_g r (= Dr.GRPO).
      eps: ε added to the std (docs/methods.md default 1e-6); 0 is allowed.
      valid_B: optional [B] bool mask of real rows.
    Returns:
      adv_B: float32 [B]. Exactly 0 for zero-variance groups, groups of size 1
      and invalid rows.
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    valid_B = _valid(valid_B, rewards_B.shape)
    adv_B, _, std_B, _ = _group_moments(rewards_B, group_B, num_groups, valid_B)
    if scale_by_std:
        # std 0 means r − mean is exactly 0 (constant or size-1 group): keep 0 even for ε = 0.
        adv_B = adv_B / jnp.where(std_B > 0, std_B + eps, 1.0)
    return adv_B


def dr_grpo_advantages(rewards_B, group_B, num_groups: int, *, valid_B=None):
    """Dr.GRPO: A_i = r_i − mean_g r (no std division).

    Dr.GRPO's other half, a constant loss normaliser (batch × max length), is
    the loss aggregation's job, not this kernel's.

    Args:
      rewards_B: [B] sequence rewards r_i.
      group_B: [B] int32 group ids in [0, num_groups).
      num_groups: static number of groups.
      valid_B: optional [B] bool mask of real rows.
    Returns:
      adv_B: float32 [B]; exactly 0 for constant groups, size-1 groups, invalid rows.
    """
    return grpo_advantages(rewards_B, group_B, num_groups, scale_by_std=False, valid_B=valid_B)


def rloo_advantages(rewards_B, group_B, num_groups: int, *, valid_B=None):
    """RLOO: A_i = r_i − mean_{j≠i, j∈g} r_j, the leave-one-out baseline.

    Computed in the equivalent form G/(G−1)·(r_i − mean_g r), G the number of
    valid rows in the group (one pass, and exactly 0 for constant groups).

    Args:
      rewards_B: [B] sequence rewards r_i.
      group_B: [B] int32 group ids in [0, num_groups).
      num_groups: static number of groups.
      valid_B: optional [B] bool mask of real rows.
    Returns:
      adv_B: float32 [B]; 0 for groups of size 1 (no other sample to compare
      with), constant groups and invalid rows.
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    valid_B = _valid(valid_B, rewards_B.shape)
    dev_B, _, _, count_B = _group_moments(rewards_B, group_B, num_groups, valid_B)
    g_B = count_B.astype(jnp.float32)
    return jnp.where(count_B > 1, g_B / jnp.maximum(g_B - 1.0, 1.0), 0.0) * dev_B


def whiten(values, mask, *, shift_mean: bool = True, eps=1e-8, ddof: int = 0):
    """Masked whitening over every masked-in entry: (x − μ)/(σ + ε).

    μ and σ are the mean and the std over entries with mask True; σ divides by
    n − ddof: the population std by default (OpenRLHF), ddof = 1 the Bessel std
    (verl's and TRL's `masked_whiten`; the difference is negligible at batch
    sizes that matter).

    Args:
      values: float array of any shape.
      mask: bool array of the same shape; masked-out entries count in no
        statistic and come out 0.
      shift_mean: static; False keeps the mean: (x − μ)/(σ + ε) + μ (TRL's
        `masked_whiten` convention, used to rescale rewards without centering).
      eps: ε added to σ.
      ddof: static, 0 or 1 (σ over n − ddof; n ≤ ddof gives σ = 0).
    Returns:
      float32 array of the input shape; 0 where masked out, and (x − μ) exactly 0
      when all masked-in values are equal (so the result is 0, or μ without
      shift_mean). All-masked input gives all zeros.
    """
    return _whiten(values, mask, shift_mean, eps, ddof)


def _whiten(values, mask, shift_mean, eps, ddof=0):
    # Separate from `whiten` because reinforce_pp_advantages has an argument of that name.
    values = jnp.asarray(values, jnp.float32)
    mask = jnp.asarray(mask).astype(bool)
    n = jnp.sum(mask).astype(jnp.float32)
    # Shift by the max first, as in `_group_moments`: accurate for close values, and
    # constant inputs give dev exactly 0.
    shift = jnp.where(n > 0, jnp.max(jnp.where(mask, values, -jnp.inf)), 0.0)
    shifted = jnp.where(mask, values - shift, 0.0)
    shifted_mean = jnp.sum(shifted) / jnp.maximum(n, 1.0)
    dev = jnp.where(mask, shifted - shifted_mean, 0.0)
    mean = shift + shifted_mean
    std = jnp.where(n > ddof, jnp.sqrt(jnp.sum(dev * dev) / jnp.maximum(n - ddof, 1.0)), 0.0)
    out = dev / jnp.where(std > 0, std + eps, 1.0)  # std 0: dev is exactly 0
    if not shift_mean:
        out = out + mean
    return jnp.where(mask, out, 0.0)


def reinforce_pp_advantages(
    rewards_B,
    group_B,
    num_groups: int,
    *,
    baseline: str = "group",
    whiten: bool = True,
    eps=1e-6,
    valid_B=None,
):
    """REINFORCE++ whitened over rows: subtract a baseline, then whiten over the batch's rows.

    A_i = r_i − mean_g r (baseline="group", "REINFORCE++-baseline") or r_i
    (baseline="none"); then, with whiten, A ← (A − μ)/(σ + ε) with μ, σ the
    mean and population std over the valid rows of the batch (each sequence
    weighs 1). The reference implementations whiten over tokens instead (longer
    responses weigh more): `reinforce_pp_token_advantages`.

    Args:
      rewards_B: [B] sequence rewards r_i.
      group_B: [B] int32 group ids in [0, num_groups) (unused with baseline="none").
      num_groups: static number of groups.
      baseline: static, "group" or "none".
      whiten: static; batch whitening on/off.
      eps: ε added to the batch std.
      valid_B: optional [B] bool mask of real rows.
    Returns:
      adv_B: float32 [B]; 0 for invalid rows, and all 0 when the (baselined)
      values are equal over the batch.
    """
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {BASELINES}")
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    valid_B = _valid(valid_B, rewards_B.shape)
    if baseline == "group":
        adv_B = dr_grpo_advantages(rewards_B, group_B, num_groups, valid_B=valid_B)
    else:
        adv_B = jnp.where(valid_B, rewards_B, 0.0)
    if whiten:
        adv_B = _whiten(adv_B, valid_B, True, eps)
    return adv_B


def reinforce_pp_token_advantages(
    rewards_B,
    group_B,
    num_groups: int,
    mask_BxT,
    *,
    baseline: str = "group",
    eps=1e-6,
    valid_B=None,
):
    """REINFORCE++ as verl and OpenRLHF compute it: baseline, then whitening over tokens.

    A_i = r_i − mean_g r (or r_i with baseline="none") is copied to the row's
    tokens, then A_{i,t} ← (A_{i,t} − μ)/(σ + ε) with μ, σ the mean and Bessel
    std over every loss token of the batch (verl's `masked_whiten`; OpenRLHF
    divides by n, a factor √(n/(n−1)) apart). A long response counts once per
    token, so μ leans towards the long rows' advantage: rows of an all-correct
    group (A_i = 0 before whitening) come out at −μ/σ, not 0.

    Args:
      rewards_B: [B] sequence rewards r_i.
      group_B: [B] int32 group ids in [0, num_groups) (unused with baseline="none").
      num_groups: static number of groups.
      mask_BxT: [B, T] bool loss mask (the response tokens).
      baseline: static, "group" or "none".
      eps: ε added to σ.
      valid_B: optional [B] bool mask of real rows.
    Returns:
      adv_BxT: float32 [B, T]; 0 off the mask and on invalid rows, all 0 when
      every token's baselined value is equal.
    """
    valid_B = _valid(valid_B, jnp.shape(rewards_B))
    adv_B = reinforce_pp_advantages(
        rewards_B, group_B, num_groups, baseline=baseline, whiten=False, valid_B=valid_B
    )
    m = jnp.asarray(mask_BxT).astype(bool) & valid_B[:, None]
    return _whiten(broadcast_to_tokens(adv_B, m), m, True, eps, 1)


def broadcast_to_tokens(adv_B, mask_BxT):
    """Copies each row's sequence advantage to its tokens: A_{i,t} = A_i·mask_{i,t}.

    Args:
      adv_B: [B] sequence advantages.
      mask_BxT: [B, T] bool (or 0/1) token mask, e.g. the response mask.
    Returns:
      adv_BxT: float32 [B, T], 0 outside the mask.
    """
    adv_B = jnp.asarray(adv_B, jnp.float32)
    return jnp.where(jnp.asarray(mask_BxT).astype(bool), adv_B[:, None], 0.0)


def gae(rewards_BxT, values_BxT, mask_BxT, *, gamma, lam, bootstrap_B=None):
    """Generalized advantage estimation over the valid (mask True) tokens.

    Over the valid tokens t < t' < … of a row, in order:
      δ_t = r_t + γ·V_next − V_t,   A_t = δ_t + γλ·A_next,   R_t = A_t + V_t,
    where V_next, A_next belong to the next *valid* token. Masked positions are
    skipped: before the response (left-padded prompt), after it (right padding)
    and in gaps between valid tokens (e.g. environment tokens of a multi-turn
    rollout; ours: a gap costs no discount step, so a rollout with gaps gives
    the same advantages as the same rollout with the gaps removed). Rewards and
    values at masked positions are ignored: put each reward on a valid token
    (usually the last). After the last valid token V_next = bootstrap_B (0 by
    default: the episode ended) and A_next = 0. One reverse `lax.scan` over time.

    Args:
      rewards_BxT: [B, T] per-token rewards r_t.
      values_BxT: [B, T] critic values V_t.
      mask_BxT: [B, T] bool token mask (the response / action tokens).
      gamma: discount γ (float, may be traced).
      lam: GAE λ (float, may be traced).
      bootstrap_B: optional [B] value of the state after the last valid token,
        for truncated rollouts.
    Returns:
      (advantages_BxT, returns_BxT): float32 [B, T], 0 at masked positions.
    """
    rewards_BxT = jnp.asarray(rewards_BxT, jnp.float32)
    values_BxT = jnp.asarray(values_BxT, jnp.float32)
    mask_BxT = jnp.asarray(mask_BxT).astype(bool)
    b = rewards_BxT.shape[0]
    if bootstrap_B is None:
        bootstrap_B = jnp.zeros((b,), jnp.float32)
    gamma = jnp.asarray(gamma, jnp.float32)
    lam = jnp.asarray(lam, jnp.float32)

    def step(carry, x):
        next_value_B, next_adv_B = carry
        r_B, v_B, m_B = x
        delta_B = r_B + gamma * next_value_B - v_B
        adv_B = delta_B + gamma * lam * next_adv_B
        # Masked steps pass the carry through untouched: that is the gap skip.
        carry = (jnp.where(m_B, v_B, next_value_B), jnp.where(m_B, adv_B, next_adv_B))
        return carry, jnp.where(m_B, adv_B, 0.0)

    init = (jnp.asarray(bootstrap_B, jnp.float32), jnp.zeros((b,), jnp.float32))
    xs = (rewards_BxT.T, values_BxT.T, mask_BxT.T)
    _, adv_TxB = lax.scan(step, init, xs, reverse=True)
    adv_BxT = adv_TxB.T
    returns_BxT = jnp.where(mask_BxT, adv_BxT + values_BxT, 0.0)
    return adv_BxT, returns_BxT
