"""CBPO: contrastive branch values and non-overlapping credit segments.

CBPO (seeds: "Contrastive Branch Policy Optimization") branches rollouts at
selected nodes. A node k on a parent trajectory, together with the branches
that share the parent's exact token prefix up to the node, forms an
exact-prefix group; the reward variation in that group is the node's
Contrastive Branch Value (CBV), an outcome-based estimate of how much the
decision at the node matters. CBV rescales the continuation advantages
without changing their sign; several nodes on one path cut it into
non-overlapping credit segments so shared tokens are not credited twice.

Layout. K nodes (a static bound; unused ones have valid_K False):
  member_KxB[k, b]  row b belongs to node k's exact-prefix group (the parent
                    row and every branch from the node; a branch of a branch
                    belongs to both nodes);
  pos_K[k]          response-token index (see `core.cliff`) of the first token
                    after the shared prefix, the same in every member row;
  start_B[b]        response-token index where row b's own tokens begin: 0
                    for a root rollout, its node's pos for a branch row.
A branch row's tokens before start_B are copies of its parent's: they get
credit 0 so the parent row alone trains them (no duplicated gradient).
Row b's token t (t ≥ start_B) belongs to the segment of the latest node k
with member_KxB[k, b] and pos_K[k] ≤ t, and is scaled by that node's factor;
tokens before the row's first node keep their advantage.

Path positions. Positions count along the row's path from the prompt: a row
whose response starts after a forced copy of its parent's prefix (a branch
sampled with the sampler's `prefixes=`) has offset_B = the copy's length, and
its first response token is at path position offset_B; 0 for every other row.

Shared prefix credit. Row s shares row b's token at path position p when
shared_BxB[b, s] > p: the two rows have the same exact prefix through p (the
length of the common path prefix; the diagonal is ignored). The row that holds
the token (p ≥ start_B) credits it with the mean of its own advantage and the
sharers' row advantages (each row's mean advantage over its tokens): the token
is trained once, with GRPO's net credit of a token all those rows contain
(Σ_s A_s, divided by how many they are), whichever row holds it. Without
sharers (shared_BxB None) a token keeps its own advantage.

Ours (the abstract gives no formulas): CBV_k = population std of the member
rewards (0.5 for a 50/50 binary split, 0 when all branches agree; 0 for groups
with < 2 members); factor_k = clip(CBV_k / mean_j CBV_j, s_min, s_max) with the
mean over valid nodes, s_min = 0.1 > 0 (sign kept), s_max = 3; when every node
has CBV 0 the factors are 1 (nothing to contrast). Entropy screening of branch
positions and the path-/node-level budget decay belong to the rollout stage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core.cliff import response_positions

_F32 = jnp.float32


def contrastive_branch_values(rewards_B, member_KxB, valid_K=None):
    """CBV_k = population std of the rewards of node k's exact-prefix group.

    Args:
      rewards_B: [B] outcome rewards.
      member_KxB: [K, B] bool group membership.
      valid_K: optional [K] bool real nodes (others get 0).
    Returns:
      (cbv_K, count_K): float32 [K] (0 for < 2 members or invalid nodes), int32 [K].
    """
    r = jnp.asarray(rewards_B, _F32)
    mem = jnp.asarray(member_KxB, bool)
    if valid_K is not None:
        mem = mem & jnp.asarray(valid_K, bool)[:, None]
    w = mem.astype(_F32)
    n_K = w.sum(-1)
    mean_K = (w @ r) / jnp.maximum(n_K, 1.0)
    dev = jnp.where(mem, r[None, :] - mean_K[:, None], 0.0)
    var_K = (dev * dev).sum(-1) / jnp.maximum(n_K, 1.0)
    cbv = jnp.where(n_K > 1, jnp.sqrt(var_K), 0.0)
    return cbv, n_K.astype(jnp.int32)


def branch_factors(cbv_K, valid_K=None, *, s_min=0.1, s_max=3.0, eps=1e-6):
    """Sign-preserving rescaling factors clip(CBV_k / mean CBV, s_min, s_max).

    Args:
      cbv_K: [K] contrastive branch values.
      valid_K: optional [K] bool real nodes (the mean is over these).
      s_min: lower clip, > 0 so no advantage changes sign (ours: 0.1).
      s_max: upper clip (ours: 3).
      eps: ε added to the mean.
    Returns:
      factor_K: float32 [K] in [s_min, s_max]; all 1 when every valid CBV is 0.
    """
    # Checked for Python numbers only: traced values (jit arguments) cannot be tested.
    if all(isinstance(x, int | float) for x in (s_min, s_max)) and not 0 < s_min <= s_max:
        raise ValueError(f"cbpo: need 0 < s_min <= s_max, got s_min={s_min}, s_max={s_max}")
    cbv = jnp.asarray(cbv_K, _F32)
    v = jnp.ones(cbv.shape, bool) if valid_K is None else jnp.asarray(valid_K, bool)
    mean = jnp.sum(jnp.where(v, cbv, 0.0)) / jnp.maximum(v.sum(), 1).astype(_F32)
    factor = jnp.clip(cbv / (mean + eps), s_min, s_max)
    return jnp.where(mean > 0, factor, 1.0)


def path_positions(mask_BxT, offset_B=None):
    """Path position of each masked-in token: its response-token index + the row's offset.

    Args:
      mask_BxT: [B, T] bool response/loss mask.
      offset_B: optional [B] int path position of each row's first response token.
    Returns:
      int32 [B, T], −1 at masked positions.
    """
    pos_BxT, _ = response_positions(mask_BxT)
    if offset_B is None:
        return pos_BxT
    return jnp.where(pos_BxT >= 0, pos_BxT + jnp.asarray(offset_B, jnp.int32)[:, None], -1)


def shared_prefix_advantages(adv_BxT, mask_BxT, shared_BxB, offset_B=None):
    """Each token's advantage averaged with the row advantages of the rows that share it.

    Ā_{b,t} = (A_{b,t} + Σ_{s≠b, shared[b,s] > p(b,t)} Ā_s) / (1 + #those s), with
    p(b,t) the token's path position and Ā_s row s's mean advantage over its tokens.

    Args:
      adv_BxT: [B, T] token advantages; mask_BxT: [B, T] bool.
      shared_BxB: [B, B] int length of the common exact path prefix of two rows.
      offset_B: optional [B] int path position of each row's first response token.
    Returns:
      float32 [B, T], 0 off the mask.
    """
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    row_B = adv.sum(-1) / jnp.maximum(m.sum(-1), 1).astype(_F32)
    pos_BxT = path_positions(m, offset_B)
    shared = jnp.asarray(shared_BxB, jnp.int32)
    others = ~jnp.eye(shared.shape[0], dtype=bool)

    def step(carry, x):
        # One sharer at a time keeps memory O(B·T) (a [B, B, T] mask would not fit at scale).
        num, den = carry
        shared_B, other_B, a = x
        take = other_B[:, None] & (shared_B[:, None] > pos_BxT) & m
        return (num + jnp.where(take, a, 0.0), den + take.astype(_F32)), None

    (num, den), _ = jax.lax.scan(step, (adv, jnp.ones_like(adv)), (shared.T, others.T, row_B))
    return jnp.where(m, num / den, 0.0)


def segment_nodes(mask_BxT, member_KxB, pos_K, valid_K=None, offset_B=None):
    """The node owning each token: latest node on the row's path at or before it.

    Args:
      mask_BxT: [B, T] bool response/loss mask.
      member_KxB: [K, B] bool; pos_K: [K] int path position of each node.
      valid_K: optional [K] bool real nodes.
      offset_B: optional [B] int path position of each row's first response token.
    Returns:
      node_BxT: int32 [B, T], the owning node, −1 before the row's first node
      and at masked positions.
    """
    pos_BxT = path_positions(mask_BxT, offset_B)
    mem = jnp.asarray(member_KxB, bool)
    if valid_K is not None:
        mem = mem & jnp.asarray(valid_K, bool)[:, None]
    pos_K = jnp.asarray(pos_K, jnp.int32)
    on = pos_BxT >= 0

    def step(carry, x):
        # One node at a time keeps memory O(B·T) (a [K, B, T] mask would not fit at scale).
        best_pos, best_node = carry
        k, p, mem_B = x
        take = mem_B[:, None] & on & (p <= pos_BxT) & (p > best_pos)  # strict: first on ties
        return (jnp.where(take, p, best_pos), jnp.where(take, k, best_node)), None

    init = (jnp.full(pos_BxT.shape, -1, jnp.int32), jnp.full(pos_BxT.shape, -1, jnp.int32))
    xs = (jnp.arange(pos_K.shape[0], dtype=jnp.int32), pos_K, mem)
    (_, node), _ = jax.lax.scan(step, init, xs)
    return node


def cbpo_advantages(
    adv_BxT,
    mask_BxT,
    rewards_B,
    member_KxB,
    pos_K,
    start_B,
    *,
    valid_K=None,
    offset_B=None,
    shared_BxB=None,
    s_min=0.1,
    s_max=3.0,
    eps=1e-6,
):
    """CBPO token advantages: CBV-rescaled segments, shared prefixes credited once.

    A_{b,t} ← factor_{node(b,t)} · Ā_{b,t} for t in a node's segment, Ā_{b,t}
    before the row's first node, 0 before start_B[b] (the parent's tokens);
    Ā = `shared_prefix_advantages` (= A without shared_BxB).

    Args:
      adv_BxT: [B, T] token advantages from the estimator.
      mask_BxT: [B, T] bool response/loss mask.
      rewards_B: [B] outcome rewards (for the CBVs).
      member_KxB, pos_K, start_B, valid_K: the branch layout (module doc); pos_K
        and start_B are path positions.
      offset_B: optional [B] path position of each row's first response token.
      shared_BxB: optional [B, B] common path prefix lengths (module doc).
      s_min, s_max, eps: see `branch_factors`.
    Returns:
      (adv_BxT, node_BxT): float32 advantages (sign of every kept token
      unchanged) and the owning node per token (−1 for none).
    """
    m = jnp.asarray(mask_BxT) != 0
    adv = jnp.where(m, jnp.asarray(adv_BxT, _F32), 0.0)
    if shared_BxB is not None:
        adv = shared_prefix_advantages(adv, m, shared_BxB, offset_B)
    cbv, _ = contrastive_branch_values(rewards_B, member_KxB, valid_K)
    factor_K = branch_factors(cbv, valid_K, s_min=s_min, s_max=s_max, eps=eps)
    node = segment_nodes(m, member_KxB, pos_K, valid_K, offset_B)
    scale = jnp.where(node >= 0, factor_K[jnp.maximum(node, 0)], 1.0)
    pos_BxT = path_positions(m, offset_B)
    owned = pos_BxT >= jnp.asarray(start_B, jnp.int32)[:, None]
    return jnp.where(m & owned, adv * scale, 0.0), node


def zero_sum_per_group(adv_BxT, mask_BxT, group_B, num_groups: int):
    """Rescales each group's positive and negative credit so its token sum is 0, signs kept.

    CBV rescaling (`cbpo_advantages`) multiplies continuation segments by factors
    ≠ 1, so a group's advantages no longer sum to zero (the paper's description
    does not ask them to). This option restores it without changing a sign: with
    P_g, N_g the sums of the group's positive and |negative| token advantages,
    positives are scaled by (P_g + N_g) / (2 P_g) and negatives by (P_g + N_g) /
    (2 N_g), so both sides carry (P_g + N_g) / 2 and the total magnitude is kept.
    A group with only one sign (or none) is left as it is.

    Args:
      adv_BxT: [B, T] advantages; mask_BxT: [B, T] loss tokens; group_B: [B] int ids
        in [0, num_groups).
    Returns:
      [B, T] float32, 0 off the mask.
    """
    m = jnp.asarray(mask_BxT) != 0
    a = jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)
    pos_B, neg_B = jnp.sum(jnp.maximum(a, 0.0), 1), jnp.sum(jnp.maximum(-a, 0.0), 1)
    pos_G = jax.ops.segment_sum(pos_B, group_B, num_segments=num_groups)
    neg_G = jax.ops.segment_sum(neg_B, group_B, num_segments=num_groups)
    both_G = (pos_G > 0) & (neg_G > 0)
    half_G = 0.5 * (pos_G + neg_G)
    up_G = jnp.where(both_G, half_G / jnp.where(pos_G > 0, pos_G, 1.0), 1.0)
    down_G = jnp.where(both_G, half_G / jnp.where(neg_G > 0, neg_G, 1.0), 1.0)
    scale_BxT = jnp.where(a > 0, up_G[group_B][:, None], down_G[group_B][:, None])
    return jnp.where(m, a * scale_BxT, 0.0)
