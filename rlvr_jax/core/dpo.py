"""Direct Preference Optimization (DPO) on pairs of verified rollouts.

DPO (Rafailov et al., 2023) trains on preference pairs (y_w chosen, y_l
rejected) of one prompt x against a frozen reference π_ref. With sequence
log-probs ℓ(y) = Σ_t log π(y_t | x, y_<t) over the response tokens,

  h = β·[(ℓ_θ(y_w) − ℓ_ref(y_w)) − (ℓ_θ(y_l) − ℓ_ref(y_l))]

and the loss is −log σ(h) ("sigmoid", the paper's). Options: label smoothing ε
(conservative DPO: −(1 − ε)·log σ(h) − ε·log σ(−h)) and the IPO loss
(h/β − 1/(2β))². β·(ℓ_θ − ℓ_ref) is each response's implicit reward.

Here the pairs come from verified rollouts (SFT → DPO → RL pipelines): within
one prompt's group, a correct response is preferred to a wrong one
(`preference_pairs`, host-side NumPy). Losses return a sum and a count, so a
caller normalises by a global pair count (micro-batches add up exactly).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

LOSS_TYPES = ("sigmoid", "ipo")


def sequence_logps(logps_BxT, mask_BxT) -> jax.Array:
    """ℓ(y) = Σ_t log π(y_t | ·) over each row's masked tokens.

    Args:
      logps_BxT: [B, T] log-probs of the sampled tokens (padding may be -inf/NaN).
      mask_BxT: [B, T] bool or {0, 1}: the response tokens.
    Returns:
      logps_B: float32 [B]; 0 for a row without tokens.
    """
    m = jnp.asarray(mask_BxT) != 0
    return jnp.sum(jnp.where(m, jnp.asarray(logps_BxT, jnp.float32), 0.0), -1)


def dpo_loss(
    chosen_logps_P,
    rejected_logps_P,
    ref_chosen_logps_P,
    ref_rejected_logps_P,
    valid_P,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
):
    """The DPO loss of P pairs, as a sum over the valid pairs and their count.

    Args:
      chosen_logps_P, rejected_logps_P: [P] policy sequence log-probs ℓ_θ(y_w), ℓ_θ(y_l).
      ref_chosen_logps_P, ref_rejected_logps_P: [P] reference ℓ_ref(y_w), ℓ_ref(y_l)
        (data: no gradient flows into them).
      valid_P: [P] bool or {0, 1}: padding pairs contribute nothing.
      beta: β > 0, the KL-regularisation strength.
      label_smoothing: ε in [0, 0.5) (sigmoid loss only): the assumed label-noise rate.
      loss_type: static, one of LOSS_TYPES.
    Returns:
      (loss_sum, count, stats): float32 scalars (sum of the valid pairs' losses,
      number of valid pairs) and [P] float32 arrays "margin" (h), "reward_chosen",
      "reward_rejected" (β·(ℓ_θ − ℓ_ref)), "accuracy" (1 where h > 0), each 0 on
      padding pairs.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"dpo loss_type {loss_type!r} is unknown; valid: {LOSS_TYPES}")
    v = jnp.asarray(valid_P) != 0
    f32 = lambda x: jnp.where(v, jnp.asarray(x, jnp.float32), 0.0)  # noqa: E731
    ref_c = jax.lax.stop_gradient(f32(ref_chosen_logps_P))
    ref_r = jax.lax.stop_gradient(f32(ref_rejected_logps_P))
    log_ratio_c = f32(chosen_logps_P) - ref_c
    log_ratio_r = f32(rejected_logps_P) - ref_r
    diff = log_ratio_c - log_ratio_r
    h = beta * diff
    if loss_type == "sigmoid":
        # −log σ(h) = softplus(−h): finite for any h.
        loss = (1.0 - label_smoothing) * jax.nn.softplus(-h) + label_smoothing * jax.nn.softplus(h)
    else:
        loss = (diff - 1.0 / (2.0 * beta)) ** 2
    loss = jnp.where(v, loss, 0.0)
    stats = {
        "margin": jnp.where(v, h, 0.0),
        "reward_chosen": jnp.where(v, beta * log_ratio_c, 0.0),
        "reward_rejected": jnp.where(v, beta * log_ratio_r, 0.0),
        "accuracy": jnp.where(v & (h > 0), 1.0, 0.0),
    }
    return jnp.sum(loss), jnp.sum(v.astype(jnp.float32)), stats


def preference_pairs(correct_B, group_B, valid_B, *, num_groups: int, pairs_per_group: int = 1):
    """Pairs (a correct row, a wrong row) of the same group, padded to a fixed count.

    Host-side (NumPy). Within group g, the k-th valid correct row (in row order)
    is paired with the k-th valid wrong row, for k < min(#correct, #wrong,
    pairs_per_group); groups whose rows all agree give no pair.

    Args:
      correct_B: [B] bool verdicts.
      group_B: [B] int group ids in [0, num_groups).
      valid_B: [B] bool: False rows (padding) are never paired.
      num_groups: G_max, the number of groups of the batch.
      pairs_per_group: the most pairs one group contributes.
    Returns:
      (chosen_P, rejected_P, valid_P) with P = num_groups · pairs_per_group: int
      row indices of the preferred and the rejected response, and a bool mask;
      padding pairs point at row 0.
    """
    correct = np.asarray(correct_B, bool)
    group = np.asarray(group_B)
    valid = np.asarray(valid_B, bool)
    size = num_groups * pairs_per_group
    chosen = np.zeros(size, np.int32)
    rejected = np.zeros(size, np.int32)
    ok = np.zeros(size, bool)
    n = 0
    for g in range(num_groups):
        rows = valid & (group == g)
        wins = np.flatnonzero(rows & correct)
        losses = np.flatnonzero(rows & ~correct)
        k = min(len(wins), len(losses), pairs_per_group)
        chosen[n : n + k], rejected[n : n + k], ok[n : n + k] = wins[:k], losses[:k], True
        n += k
    # Valid pairs first, in group order; the rest is padding.
    return chosen, rejected, ok
