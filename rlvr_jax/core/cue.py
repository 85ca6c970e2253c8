"""Cue-GRPO: rarity-aware redistribution of positive advantages over strategy clusters.

Cue-GRPO (seeds: "When Correct Solutions Repeat") partitions each group's
verified-correct rollouts by a deterministic strategy cue (for the arithmetic
task: `tasks.arithmetic.response_cue`, the order of the operations); a cue that
recurs collects positive advantage mass in proportion to how often it is
sampled. The rule reweights positive advantages by cluster rarity,
w_i ∝ n_{c(i)}^{−α}, renormalised so each group's positive mass Σ_{A_i>0} A_i
is unchanged; negative advantages are unchanged. The judge-partition variant
(CR under JP) is this kernel with judge-made cluster ids.

Ours: the rows reweighted are those with A_i > 0 (A_i = the row's mean token
advantage; for GRPO these are exactly the correct rows of mixed groups);
α = 1; correct rows without a cue (cue id −1) share one "no cue" cluster by
default, so an unreadable trace earns no rarity bonus (`missing_cue_singleton`
makes each its own cluster instead). Cluster and group statistics use [B, B]
same-group comparisons: no `num_groups` is needed and any int group ids work.
"""

from __future__ import annotations

import jax.numpy as jnp

_F32 = jnp.float32


def cue_ids(cues) -> list[int]:
    """Host helper: strategy cue strings (None = no cue) -> int cluster ids (−1 = no cue).

    Ids are only compared within a group, so one numbering for the batch is enough.

    Args:
      cues: sequence of str or None, one per row.
    Returns:
      list of int, equal ids for equal strings, in order of first appearance.
    """
    table: dict[str, int] = {}
    return [-1 if c is None else table.setdefault(c, len(table)) for c in cues]


def sequence_advantages(adv_BxT, mask_BxT):
    """A_i = mean of the row's masked token advantages (0 for empty rows); float32 [B]."""
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    return adv.sum(-1) / jnp.maximum(m.sum(-1), 1).astype(_F32)


def cue_rarity_scales(
    adv_B, group_B, cue_B, *, alpha=1.0, missing_cue_singleton=False, valid_B=None
):
    """Per-row multipliers s_i: rarity weights on positive rows, 1 elsewhere.

    With P_g the valid rows of group g with A_i > 0, n_c the number of rows of P_g
    with cue c, and w_i = n_{c(i)}^{−α}:
      s_i = w_i · Σ_{j∈P_g} A_j / Σ_{j∈P_g} w_j A_j   (i ∈ P_g),   s_i = 1 otherwise,
    so Σ_{i∈P_g} s_i A_i = Σ_{i∈P_g} A_i (positive mass conserved) and s_i > 0.

    Args:
      adv_B: [B] sequence advantages A_i.
      group_B: [B] int group ids (any values; rows compare equal ids).
      cue_B: [B] int cluster ids, −1 = no cue.
      alpha: rarity exponent α ≥ 0 (0 = GRPO; ours: 1).
      missing_cue_singleton: static; True makes every cue −1 row its own cluster.
      valid_B: optional [B] bool real rows (invalid rows get s = 1 and count nowhere).
    Returns:
      (scale_B, size_B): float32 [B] multipliers and int32 [B] cluster sizes (0 off P).
    """
    adv_B = jnp.asarray(adv_B, _F32)
    group_B = jnp.asarray(group_B, jnp.int32)
    cue_B = jnp.asarray(cue_B, jnp.int32)
    valid_B = jnp.ones(adv_B.shape, bool) if valid_B is None else jnp.asarray(valid_B, bool)
    pos_B = valid_B & (adv_B > 0)
    same_group = (group_B[:, None] == group_B[None, :]) & pos_B[:, None] & pos_B[None, :]
    same_cue = cue_B[:, None] == cue_B[None, :]
    if missing_cue_singleton:
        same_cue = same_cue & ((cue_B[:, None] >= 0) | jnp.eye(adv_B.shape[0], dtype=bool))
    size_B = jnp.sum(same_group & same_cue, axis=1).astype(jnp.int32)
    w_B = jnp.where(pos_B, jnp.maximum(size_B, 1).astype(_F32) ** (-alpha), 0.0)
    mass_B = same_group.astype(_F32) @ jnp.where(pos_B, adv_B, 0.0)
    wmass_B = same_group.astype(_F32) @ (w_B * jnp.where(pos_B, adv_B, 0.0))
    # wmass > 0 on every positive row (it sums positive terms including its own).
    scale_B = jnp.where(pos_B, w_B * mass_B / jnp.where(pos_B, wmass_B, 1.0), 1.0)
    return scale_B, size_B


def cue_rarity_advantages(
    adv_BxT, mask_BxT, group_B, cue_B, *, alpha=1.0, missing_cue_singleton=False, valid_B=None
):
    """Cue-GRPO token advantages: each row's tokens times its `cue_rarity_scales` s_i.

    Args:
      adv_BxT: [B, T] token advantages (A_i broadcast by the estimator).
      mask_BxT: [B, T] bool response/loss mask.
      group_B, cue_B, alpha, missing_cue_singleton, valid_B: as in `cue_rarity_scales`.
    Returns:
      adv_BxT: float32 [B, T], 0 at masked positions; negative and zero rows unchanged.
    """
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    scale_B, _ = cue_rarity_scales(
        sequence_advantages(adv, m),
        group_B,
        cue_B,
        alpha=alpha,
        missing_cue_singleton=missing_cue_singleton,
        valid_B=valid_B,
    )
    return adv * scale_B[:, None]
