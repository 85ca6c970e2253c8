"""CBPO's rollout (`rollout.name = "branching"`): roots, then branches from exact parent prefixes.

Paper-fixed (abstract, "Contrastive Branch Policy Optimization"): generation
entropy screens candidate branch positions across the whole response;
path-level and node-level decay spread a fixed rollout budget over
trajectories and positions (so exploration does not collapse onto a few paths
or adjacent tokens); a branch continues from its parent's identical token
prefix, and the parent with the branches of a node is an exact-prefix group.

Here, per group of n requested rows:
  1. ⌈roots·n⌉ roots are sampled on the prompt.
  2. Candidates are the roots' sampled tokens at path positions t ≥ 1 (a
     branch at t keeps the root's tokens before t and resamples from t); the
     top `entropy_frac` of the group's candidates by sampling-time entropy H_t
     are kept (at least one).
  3. The branch budget, min(n − roots, max_branches) rows (max_branches = 0:
     no cap beyond n − roots), buys ⌊budget / width⌋ nodes of `width` branches
     each, chosen greedily by score H_t · α^{k_r} · Π_{t' chosen on r}
     (1 − β^{|t − t'|}): α = path_decay per node root r already has, β =
     node_decay towards its nodes (a chosen position scores 0). Rows the nodes
     do not use are sampled as more roots, so every group has n rows.
  4. Branches are sampled in one call with the root's tokens before t as a
     forced prefix (the sampler's `prefixes=`): the copy is context (never in
     the response mask, its log-probs stay the parent's), and the continuation
     is cut at L_max − t tokens so no path is longer than a root may be.
Every row is verified on its whole path (prefix copy + continuation).

Rows report the tree: branch_id_B (row index within its group, in request
order), branch_parent_B (the parent's id, −1 for a root), branch_pos_B (path
position of the row's first sampled token: its branch point, 0 for a root),
branched_B; and, logged by the trainer, branches_per_root_B (branch rows hung on
each root; NaN on branch rows) and node_cbv_B (the reward spread of the node a
branch row came from, population std over parent + branches; NaN on roots) and
node_contrast_B (1 where that group's rewards differ, CBV > 0; NaN on roots).
The score signal "branch_tree" turns the tree into the credit layout of the
"cbpo" transform. Ours: roots ¼ (G = 8: 2 roots, 3 nodes of 2 branches),
entropy_frac 0.2, width 2, α = β = ½, one
level of branching (branches are not branched again), single-turn tasks only.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, verified
from rlvr_jax.rollout.groups import Groups, stack_rows
from rlvr_jax.sampling import Rollout
from rlvr_jax.tokenizers import encode_prompt

# The tree every branched row reports (Groups.info), read by the score signal "branch_tree".
TREE_FIELDS = ("branch_id_B", "branch_parent_B", "branch_pos_B")


def choose_nodes(
    entropy_RxT: np.ndarray,
    lengths_R: np.ndarray,
    *,
    num_nodes: int,
    entropy_frac: float,
    path_decay: float,
    node_decay: float,
) -> list[tuple[int, int]]:
    """Branch nodes (root, path position) of one group, by entropy screening and decay.

    Args:
      entropy_RxT: [R, T] sampling-time entropy of each root's t-th sampled token.
      lengths_R: [R] sampled tokens per root (positions ≥ length are not candidates).
      num_nodes: how many nodes to choose (fewer when the candidates run out).
      entropy_frac: share of the candidates (positions 1 ≤ t < length) kept by entropy.
      path_decay: α, a root's scores × α per node already chosen on it.
      node_decay: β, a candidate's score × (1 − β^d) for each chosen node at distance d.
    Returns:
      The chosen (root, position) pairs, in the order chosen.
    """
    r_n, t_n = entropy_RxT.shape
    t = np.arange(t_n)
    cand = (t[None, :] >= 1) & (t[None, :] < np.asarray(lengths_R)[:, None])
    if not cand.any() or num_nodes <= 0:
        return []
    h = np.asarray(entropy_RxT, np.float64)
    keep = max(1, math.ceil(entropy_frac * cand.sum()))
    cut = np.sort(h[cand])[::-1][keep - 1]
    cand &= h >= cut
    score = np.where(cand, np.maximum(h, 1e-12), 0.0)  # a zero-entropy candidate still counts
    nodes: list[tuple[int, int]] = []
    for _ in range(num_nodes):
        flat = int(np.argmax(score))
        r, p = divmod(flat, t_n)
        if score[r, p] <= 0:
            break
        nodes.append((r, p))
        score[r] *= path_decay * (1.0 - node_decay ** np.abs(t - p))
    return nodes


def _cut(ro: Rollout, keep_R: np.ndarray, stop_ids) -> Rollout:
    """Each row's sampled tokens cut to its first keep_R[r] (stopped: it ends with a stop id)."""
    resp = ro.response_mask.copy()
    n = np.cumsum(resp, axis=-1)
    drop = resp & (n > np.asarray(keep_R)[:, None])
    resp &= ~drop
    stopped = np.array([
        bool(resp[r].any()) and int(ro.tokens[r][resp[r]][-1]) in stop_ids
        for r in range(len(resp))
    ])  # fmt: skip
    zero = lambda x: np.where(drop, 0, x)  # noqa: E731
    return dataclasses.replace(
        ro,
        attention_mask=ro.attention_mask & ~drop,
        response_mask=resp,
        logps=zero(ro.logps),
        sampling_logps=zero(ro.sampling_logps),
        entropy=zero(ro.entropy),
        stopped=stopped,
    )


def _rows(ro: Rollout) -> list[dict]:
    fields = dict(tokens=ro.tokens, attention_mask=ro.attention_mask, prompt_mask=ro.prompt_mask)
    fields.update(response_mask=ro.response_mask, behaviour_logps=ro.logps, entropy=ro.entropy)
    return [
        {**{k: v[r] for k, v in fields.items()}, "stopped": bool(ro.stopped[r]), "info": {}}
        for r in range(len(ro.tokens))
    ]


@ROLLOUTS.register(
    "branching",
    roots=0.25,
    entropy_frac=0.2,
    width=2,
    path_decay=0.5,
    node_decay=0.5,
    max_branches=0,
)
def branching(
    ctx: RolloutContext, *, roots, entropy_frac, width, path_decay, node_decay, max_branches
) -> Groups:
    """CBPO's branched groups (module doc). Options are its constants, named as there."""
    req = ctx.request
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'branching' cannot continue prefixes (PAIR)")
    if ctx.task.episode_turns():
        raise ValueError(
            f"config.rollout.name = 'branching' branches single-turn responses; task "
            f"{ctx.task.name!r} is multi-turn (branching inside a model turn is not built)"
        )
    params = ctx.params()
    l_max = params.max_new_tokens
    prompts = [encode_prompt(ctx.tokenizer, p.prompt) for p in req.problems]
    counts = [int(n) for n in req.counts]
    n_roots = [min(n, max(1, math.ceil(roots * n))) for n in counts]
    root_g = np.repeat(np.arange(len(counts)), n_roots)
    k_root, k_branch = jax.random.split(ctx.key)
    ro = ctx.sampler.sample([prompts[g] for g in root_g], params, k_root)
    lengths = ro.response_mask.sum(-1)
    # Per root: its sampled tokens, their log-probs and entropies, in path order.
    sampled = [ro.tokens[r][ro.response_mask[r]] for r in range(len(root_g))]
    ent = np.zeros((len(root_g), l_max))
    for r in range(len(root_g)):
        ent[r, : lengths[r]] = ro.entropy[r][ro.response_mask[r]]
    # The second call: per group, the branch rows of its nodes, then the extra roots.
    second, parent, pos = [], [], []  # per second-call row: group, root row, branch point
    first = np.cumsum([0, *n_roots])
    for g, n in enumerate(counts):
        budget = n - n_roots[g]
        if max_branches:
            budget = min(budget, int(max_branches))
        rows = np.arange(first[g], first[g + 1])
        nodes = choose_nodes(
            ent[rows],
            lengths[rows],
            num_nodes=budget // int(width),
            entropy_frac=entropy_frac,
            path_decay=path_decay,
            node_decay=node_decay,
        )
        for r, p in nodes:
            for _ in range(int(width)):
                second.append(g), parent.append(int(rows[r])), pos.append(p)
        for _ in range(n - n_roots[g] - len(nodes) * int(width)):
            second.append(g), parent.append(-1), pos.append(0)
    rows_out = _rows(ro)
    if second:
        prefixes = [
            sampled[a][:p].tolist() if a >= 0 else [] for a, p in zip(parent, pos, strict=True)
        ]
        ro2 = ctx.sampler.sample([prompts[g] for g in second], params, k_branch, prefixes=prefixes)
        rows_out += _rows(_cut(ro2, l_max - np.asarray(pos), set(ctx.tokenizer.stop_ids)))
    # Request order: each group's roots, then its branch rows and extra roots; ids per group.
    order, info = [], {k: [] for k in ("branch_id_B", "branch_parent_B", "branch_pos_B")}
    second = np.asarray(second, int)
    for g in range(len(counts)):
        mine = [int(r) for r in range(first[g], first[g + 1])]
        mine += [len(root_g) + i for i in np.flatnonzero(second == g)]
        local = {row: i for i, row in enumerate(mine)}
        for row in mine:
            j = row - len(root_g)
            a = parent[j] if j >= 0 else -1
            order.append(row)
            info["branch_id_B"].append(local[row])
            info["branch_parent_B"].append(local[a] if a >= 0 else -1)
            info["branch_pos_B"].append(pos[j] if j >= 0 else 0)
    info = {k: np.asarray(v, np.int32) for k, v in info.items()}
    valid = np.ones(len(order), bool)
    groups = stack_rows([rows_out[r] for r in order], req.group_R, valid, list(req.problems))
    groups = verified(ctx, groups)
    tree = (info["branch_parent_B"], info["branch_pos_B"])
    info.update(tree_stats(groups.group, groups.rewards, *tree))
    info["branched_B"] = info["branch_parent_B"] >= 0
    return dataclasses.replace(groups, info=info)


def tree_stats(group_B, rewards_B, parent_B, pos_B) -> dict[str, np.ndarray]:
    """branches_per_root_B (NaN on branch rows), node_cbv_B and node_contrast_B (NaN on roots).

    node_contrast_B is 1 where the row's node group does not agree (CBV > 0), else 0.

    Args:
      group_B: [B] group ids; rewards_B: [B] rewards; parent_B: [B] parent id within
        the group (−1 = root); pos_B: [B] branch points. Rows of a group are
        contiguous and their ids are their order.
    """
    group_B, parent_B, pos_B = (np.asarray(x) for x in (group_B, parent_B, pos_B))
    rewards_B = np.asarray(rewards_B, np.float64)
    first = {int(g): int(np.flatnonzero(group_B == g)[0]) for g in np.unique(group_B)}
    par = np.array(
        [first[int(g)] + p if p >= 0 else -1 for g, p in zip(group_B, parent_B, strict=True)]
    )
    per_root = np.full(len(par), np.nan, np.float32)
    cbv = np.full(len(par), np.nan, np.float32)
    for b in range(len(par)):
        if par[b] < 0:
            per_root[b] = np.sum(par == b)
        else:
            node = np.flatnonzero((par == par[b]) & (pos_B == pos_B[b]))
            cbv[b] = np.std(rewards_B[[par[b], *node]])
    contrast = np.where(np.isnan(cbv), np.nan, (cbv > 0).astype(np.float32))
    return {"branches_per_root_B": per_root, "node_cbv_B": cbv, "node_contrast_B": contrast}
