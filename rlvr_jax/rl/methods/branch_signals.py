"""The score signal "branch_tree": CBPO's credit layout from the branching rollout's tree.

  signal       requires                                        provides (core.cbpo layout)
  branch_tree  branch_id_B, branch_parent_B, branch_pos_B      branch_member_KxB, branch_pos_K,
               (rollout "branching")                           branch_start_B, branch_offset_B,
                                                               branch_shared_BxB

A node is a parent row and a branch point p with the branch rows sampled from
its first p tokens; its exact-prefix group is the parent, those branches and
their descendants. Positions are path positions (`core.cbpo`): a branch row's
response starts at its branch point (its copy of the parent's prefix is
context), so offset_B = start_B = branch_pos_B. branch_shared_BxB[b, s] is the
length of the exact path prefix rows b and s have in common, read off the tree
(never off token equality): the parent holds each shared token once and credits
it with the mean advantage of every row through it, whatever the row order.
"""

from __future__ import annotations

import numpy as np

from rlvr_jax.rl import signals

BIG = np.iinfo(np.int32).max


def tree_layout(group_B, id_B, parent_B, pos_B, valid_B, *, max_nodes: int):
    """The CBPO layout of a batch of branched groups.

    Args:
      group_B: [B] group ids; id_B: [B] row id within its group; parent_B: [B] the
        parent's id (−1: a root); pos_B: [B] branch point (path position of the
        row's first sampled token); valid_B: [B] bool (invalid rows are ignored).
      max_nodes: K, node slots (B is always enough: every node has a branch row).
    Returns:
      (member_KxB bool, pos_K int32 (−1 = padding slot), start_B, offset_B int32 [B],
      shared_BxB int32 [B, B]).
    """
    group_B, id_B, parent_B, pos_B = (
        np.asarray(x, np.int64) for x in (group_B, id_B, parent_B, pos_B)
    )
    valid_B = np.asarray(valid_B, bool)
    b_n = len(group_B)
    row_of = {
        (int(g), int(i)): r
        for r, (g, i) in enumerate(zip(group_B, id_B, strict=True))
        if valid_B[r]
    }
    parent = np.full(b_n, -1)
    for r in np.flatnonzero(valid_B & (parent_B >= 0)):
        key = (int(group_B[r]), int(parent_B[r]))
        if key not in row_of:
            raise ValueError(
                f"branch_tree: row {r} (group {key[0]}) branches from id {key[1]}, which is not "
                "a valid row of the batch (a branched group must be kept whole)"
            )
        parent[r] = row_of[key]

    def chain(r):
        """[(ancestor, cut)]: r shares each ancestor's path positions < cut."""
        out, cut = [(r, BIG)], BIG
        while parent[r] >= 0:
            cut = min(cut, int(pos_B[r]))
            r = int(parent[r])
            out.append((r, cut))
        return out

    chains = [dict(chain(r)) if valid_B[r] else {} for r in range(b_n)]
    shared = np.zeros((b_n, b_n), np.int64)
    for b in range(b_n):
        for s in range(b + 1, b_n):
            common = chains[b].keys() & chains[s].keys()
            if common:
                shared[b, s] = shared[s, b] = max(min(chains[b][a], chains[s][a]) for a in common)
    np.fill_diagonal(shared, 0)
    nodes = sorted({(int(parent[r]), int(pos_B[r])) for r in np.flatnonzero(parent >= 0)})
    if len(nodes) > max_nodes:
        raise ValueError(f"branch_tree: {len(nodes)} nodes for {max_nodes} slots")
    member = np.zeros((max_nodes, b_n), bool)
    pos_K = np.full(max_nodes, -1, np.int32)
    for k, (a, p) in enumerate(nodes):
        pos_K[k] = p
        member[k, a] = True
        for r in np.flatnonzero(parent >= 0):
            path = chain(int(r))  # r belongs to node (a, p) if it descends from a branch there
            member[k, r] |= any(
                x == a and int(pos_B[y]) == p
                for (y, _), (x, _) in zip(path, path[1:], strict=False)
            )
    start = np.where(parent >= 0, pos_B, 0).astype(np.int32)
    return member, pos_K, start, start.copy(), np.minimum(shared, BIG).astype(np.int32)


@signals.register(
    "branch_tree",
    provides=(
        "branch_member_KxB",
        "branch_pos_K",
        "branch_start_B",
        "branch_offset_B",
        "branch_shared_BxB",
    ),
    requires=("branch_id_B", "branch_parent_B", "branch_pos_B"),
)
def branch_tree(ctx, groups, batch):
    """CBPO's layout of the branching rollout's tree (module doc); K = B node slots."""
    del ctx, groups
    member, pos, start, offset, shared = tree_layout(
        batch["group_B"],
        batch["branch_id_B"],
        batch["branch_parent_B"],
        batch["branch_pos_B"],
        batch["valid_B"],
        max_nodes=len(batch["group_B"]),
    )
    return {
        "branch_member_KxB": member,
        "branch_pos_K": pos,
        "branch_start_B": start,
        "branch_offset_B": offset,
        "branch_shared_BxB": shared,
    }
