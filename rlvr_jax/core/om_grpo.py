"""OM-GRPO: label-free soft-consensus rewards, answer-span masking, contrast augmentation.

OM-GRPO (seeds: "Don't Peek at the Answer") replaces the verifier with answer
consensus among the group's own rollouts, and decouples that reward from the
update: no gradient on the answer span, so the policy cannot raise its reward by
reinforcing the answer tokens themselves. Fixed by the abstract: a soft
consensus reward, the answer-span gradient mask, and a contrast-augmented
reward from pairwise comparisons over existing trajectories (no new rollouts).

Ours: the soft consensus reward of rollout i is the share of its group's
valid rollouts that give the same answer, n_{a_i}/n_g (self included: the
empirical probability of a_i under the policy; majority vote is its argmax,
TTRL's reward), or (n_{a_i} − 1)/(n_g − 1) with `leave_one_out`; rollouts
without an answer (id −1) get 0. The contrast-augmented reward mixes it with
the rollout's win rate over its compared pairs in the group:
r'_i = (1 − λ)·r_i + λ·win_i (λ = .5), r'_i = r_i when i was compared with no
one. Who judges a pair (the policy, a judge, a rule) is the score stage's
choice; it hands over P(i beats j) and which pairs were compared.

Answer ids are ints per row, equal ids meaning equal answers (the score stage
canonicalises answers, e.g. parsed integers). The answer span is given in
response-token indices [start, end) (convention of `core.cliff`), −1 = none.
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr_jax.core.cliff import response_positions

_F32 = jnp.float32


def _rows(group_B, valid_B, n):
    g = jnp.asarray(group_B, jnp.int32)
    v = jnp.ones((n,), bool) if valid_B is None else jnp.asarray(valid_B, bool)
    return (g[:, None] == g[None, :]) & v[:, None] & v[None, :], v


def soft_consensus_rewards(answer_B, group_B, *, leave_one_out=False, valid_B=None):
    """Soft consensus reward: share of the group agreeing with the row's answer.

    Args:
      answer_B: [B] int answer ids, −1 = no answer.
      group_B: [B] int group ids (any values).
      leave_one_out: static; (n_a − 1)/(n_g − 1) instead of n_a/n_g (ours: False).
      valid_B: optional [B] bool real rows.
    Returns:
      rewards_B: float32 [B] in [0, 1]; 0 for rows without an answer, invalid
      rows, and (leave_one_out) groups of one.
    """
    a = jnp.asarray(answer_B, jnp.int32)
    same_group, v = _rows(group_B, valid_B, a.shape[0])
    n_g = same_group.sum(-1).astype(_F32)
    agree = (same_group & (a[:, None] == a[None, :])).sum(-1).astype(_F32)
    if leave_one_out:
        r = (agree - 1.0) / jnp.maximum(n_g - 1.0, 1.0)
    else:
        r = agree / jnp.maximum(n_g, 1.0)
    return jnp.where(v & (a >= 0), r, 0.0)


def contrast_augmented_rewards(
    rewards_B, wins_BxB, compared_BxB, group_B, *, lam=0.5, valid_B=None
):
    """r'_i = (1 − λ)·r_i + λ·(mean over compared j in i's group of P(i beats j)).

    Args:
      rewards_B: [B] base rewards (e.g. soft consensus).
      wins_BxB: [B, B] P(row i beats row j) in [0, 1] from pairwise comparisons.
      compared_BxB: [B, B] bool pairs that were compared (only same-group,
        valid, i ≠ j pairs count).
      group_B: [B] int group ids.
      lam: λ ∈ [0, 1] (ours: 0.5).
      valid_B: optional [B] bool real rows.
    Returns:
      (rewards_B, win_B): float32 [B] augmented rewards (= r_i when uncompared;
      0 on invalid rows) and win rates (0 when uncompared).
    """
    r = jnp.asarray(rewards_B, _F32)
    n = r.shape[0]
    same_group, v = _rows(group_B, valid_B, n)
    c = jnp.asarray(compared_BxB, bool) & same_group & ~jnp.eye(n, dtype=bool)
    n_c = c.sum(-1).astype(_F32)
    win = jnp.where(c, jnp.asarray(wins_BxB, _F32), 0.0).sum(-1) / jnp.maximum(n_c, 1.0)
    out = jnp.where(n_c > 0, (1.0 - lam) * r + lam * win, r)
    return jnp.where(v, out, 0.0), jnp.where(n_c > 0, win, 0.0)


def answer_span_mask(mask_BxT, answer_start_B, answer_end_B):
    """The loss mask without each row's answer span (response-token indices [start, end)).

    Args:
      mask_BxT: [B, T] bool response/loss mask.
      answer_start_B: [B] int first answer token, −1 = no span (row unchanged).
      answer_end_B: [B] int one past the last answer token (≤ start: empty span).
    Returns:
      mask_BxT: bool [B, T].
    """
    m = jnp.asarray(mask_BxT) != 0
    pos, _ = response_positions(m)
    s = jnp.asarray(answer_start_B, jnp.int32)[:, None]
    e = jnp.asarray(answer_end_B, jnp.int32)[:, None]
    in_span = (s >= 0) & (pos >= s) & (pos < e)
    return m & ~in_span


def majority_vote_rewards(answer_B, group_B, *, valid_B=None):
    """TTRL's label-free reward: 1 if the row gives its group's most common answer, else 0.

    The baseline OM-GRPO compares with (majority-vote pseudo-labels, "TTRL").
    Ties between equally common answers go to the one appearing first in the
    group (row order), as a first-seen-wins vote count does. Rows without an
    answer (id −1) never vote and get 0; a group without answers gets 0.

    Args:
      answer_B: [B] int answer ids, −1 = no answer.
      group_B: [B] int group ids.
      valid_B: optional [B] bool real rows.
    Returns:
      (rewards_B, majority_B): float32 [B] rewards in {0, 1} and the int32
      majority answer id of each row's group (−1 without one).
    """
    a = jnp.asarray(answer_B, jnp.int32)
    n = a.shape[0]
    same_group, v = _rows(group_B, valid_B, n)
    voter = v & (a >= 0)
    voters = same_group & voter[None, :]
    same = voters & (a[:, None] == a[None, :])  # [i, j]: j votes for i's answer
    count = same.sum(-1)  # votes for row i's answer (0 for non-voters)
    idx = jnp.arange(n)
    first = jnp.min(jnp.where(same, idx[None, :], n), -1)  # first row giving i's answer
    # Row j's answer beats row i's: more votes, or as many and seen earlier.
    key = jnp.where(voter, count * (n + 1) + (n - first), -1)
    best = jnp.argmax(jnp.where(voters, key[None, :], -1), -1)
    majority = jnp.where(voters.any(-1), a[best], -1)
    rewards = jnp.where(voter & (a == majority), 1.0, 0.0).astype(_F32)
    return rewards, jnp.where(v, majority, -1).astype(jnp.int32)
