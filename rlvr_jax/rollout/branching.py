"""CBPO's rollout (`rollout.name = "branching"`): roots, then branches from exact parent prefixes.

Paper-fixed (abstract, "Contrastive Branch Policy Optimization"): generation
entropy screens candidate branch positions across the whole response;
path-level and node-level decay spread a fixed rollout budget over
trajectories and positions (so exploration does not collapse onto a few paths
or adjacent tokens); a branch continues from its parent's identical token
prefix, and the parent with the branches of a node is an exact-prefix group.

Here, per group of n requested rows:
  1. ⌈roots·n⌉ roots are sampled on the prompt: single-turn responses, or whole
     episodes against `task.env` on a multi-turn task (`run_episodes`, as the
     "multi_turn" rollout: the task's turn limit, the environment's reward).
  2. Candidates are the roots' sampled tokens at path positions t ≥ 1, where
     t counts the tokens the policy sampled along the path (an episode's tool
     results are not candidates and take no position); the top `entropy_frac`
     of the group's candidates by sampling-time entropy H_t are kept (at least one).
  3. The branch budget, min(n − roots, max_branches) rows (max_branches = 0:
     no cap beyond n − roots), buys ⌊budget / width⌋ nodes of `width` branches
     each, chosen greedily by score H_t · α^{k_r} · Π_{t' chosen on r}
     (1 − β^{|t − t'|}): α = path_decay per node root r already has, β =
     node_decay towards its nodes (a chosen position scores 0). Rows the nodes
     do not use are sampled as more roots, so every group has n rows.
  4. Branches are sampled in one pass (`resume_at`): a branch at t is forced
     the root's exact path before its t-th sampled token (in an episode: the
     earlier turns, the tool results between them and the start of the model
     turn holding t) with the sampler's `prefixes=`; the copy is context
     (never in the branch's response mask: the parent alone trains it). The
     branch then samples from t, and its sampled part is cut so the turn
     holding t is at most max_new_tokens long (single-turn: no path is longer
     than a root may be). An episode's branch replays the root's finished turns
     into a fresh environment (which must answer with the same tool results)
     and continues with tool calls until the environment ends it.
A single-turn row is verified on its whole path (copy + continuation); an
episode's reward is its environment's (rows report turns_B as "multi_turn").

Rows report the tree: branch_id_B (row index within its group, in request
order), branch_parent_B (the parent's id, −1 for a root), branch_pos_B (path
position of the row's first sampled token: its branch point, 0 for a root),
branched_B; and, logged by the trainer, branches_per_root_B (branch rows hung on
each root; NaN on branch rows) and node_cbv_B (the reward spread of the node a
branch row came from, population std over parent + branches; NaN on roots) and
node_contrast_B (1 where that group's rewards differ, CBV > 0; NaN on roots).
The score signal "branch_tree" turns the tree into the credit layout of the
"cbpo" transform (path positions count sampled tokens, so tool results are
never credited). Ours: roots ¼ (G = 8: 2 roots, 3 nodes of 2 branches),
entropy_frac 0.2, width 2, α = β = ½, one level of branching (branches are not
branched again), episodes branched only on deterministic environments (a
replay that differs raises).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from rlvr_jax.registry import in_range
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, truncate, verified
from rlvr_jax.rollout.groups import Groups, stack_rows
from rlvr_jax.rollout.multiturn import Resume, run_episodes
from rlvr_jax.sampling import Rollout
from rlvr_jax.tasks.base import CORRECT
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


def resume_at(ro: Rollout, r: int, p: int, turns=(), observations=()) -> Resume:
    """Where a branch at row r's p-th sampled token resumes: the exact path before that token.

    The path is everything after the prompt (sampled turns and, in an episode,
    the observations between them); the branch copies it up to the p-th sampled
    token, so a branch point is always inside a model turn. The finished turns
    before it (`turns`, `observations`: the root episode's) replay the environment.
    """
    after = ro.attention_mask[r] & ~ro.prompt_mask[r]
    path, sampled = ro.tokens[r][after], ro.response_mask[r][after]
    at = int(np.flatnonzero(sampled)[p])
    starts = np.flatnonzero(sampled & ~np.concatenate([[False], sampled[:-1]]))
    k = int(np.searchsorted(starts, at, side="right")) - 1  # the turn holding the point
    return Resume(path[:at].tolist(), list(turns[:k]), list(observations[:k]), int(starts[k]))


def _rows(ro: Rollout, **verdict) -> list[dict]:
    fields = dict(tokens=ro.tokens, attention_mask=ro.attention_mask, prompt_mask=ro.prompt_mask)
    fields.update(response_mask=ro.response_mask, behaviour_logps=ro.logps, entropy=ro.entropy)
    out = []
    for r in range(len(ro.tokens)):
        row = {k: v[r] for k, v in fields.items()}
        row.update({k: v[r] for k, v in verdict.items()}, stopped=bool(ro.stopped[r]), info={})
        out.append(row)
    return out


def _play(ctx: RolloutContext, problems, resume, key, turns: int):
    """(Rollout, row dicts, turn texts, observations) of one pass; rows resume at `resume`.

    `resume`: per row a Resume or None (a fresh row), or None for all fresh.

    Single-turn: one response per row, its sampled part cut so the path holds at
    most max_new_tokens (verified later on the whole path). Episodes (turns > 0):
    `run_episodes`, whose rewards are the environment's; the turn texts and
    observations of each episode are returned (None single-turn).
    """
    params = ctx.params()
    if turns:
        ep = run_episodes(ctx.sampler, ctx.tokenizer, problems, ctx.task.env, params, key,
                          max_turns=turns, resume=resume)  # fmt: skip
        reasons = [x.info["reason"] for x in ep.results]
        rows = _rows(ep.rollout, reward=ep.rewards, correct=[x == CORRECT for x in reasons],
                     reason=reasons)  # fmt: skip
        for row, n in zip(rows, ep.num_turns, strict=True):
            row["info"]["turns_B"] = n
        return ep.rollout, rows, ep.turns, ep.observations
    prompts = [encode_prompt(ctx.tokenizer, x.prompt) for x in problems]
    forced = None if resume is None else [list(x.tokens) if x else [] for x in resume]
    ro = ctx.sampler.sample(prompts, params, key, prefixes=forced)
    if forced is not None:
        keep = params.max_new_tokens - np.array([len(f) for f in forced])
        ro = truncate(ro, keep, set(ctx.tokenizer.stop_ids))
    return ro, _rows(ro), None, None


def _check(c) -> None:
    r = c.rollout.branching
    in_range("rollout.branching", r, "roots", 0.0, 1.0, lo_open=True)
    in_range("rollout.branching", r, "entropy_frac", 0.0, 1.0, lo_open=True)
    in_range("rollout.branching", r, "width", 1, 1 << 16)
    in_range("rollout.branching", r, "path_decay", 0.0, 1.0)
    in_range("rollout.branching", r, "node_decay", 0.0, 1.0)
    in_range("rollout.branching", r, "max_branches", 0, 1 << 16)


@ROLLOUTS.register(
    "branching",
    check=_check,
    provides=TREE_FIELDS,
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
    turns = ctx.task.episode_turns()
    if turns and ctx.overlong_cache:
        raise ValueError(
            "config.reward.overlong_cache penalises one response's length; with "
            f"config.rollout.name = 'branching' on the multi-turn task {ctx.task.name!r} set it "
            "to 0"
        )
    counts = [int(n) for n in req.counts]
    n_roots = [min(n, max(1, math.ceil(roots * n))) for n in counts]
    root_g = np.repeat(np.arange(len(counts)), n_roots)
    k_root, k_branch = jax.random.split(ctx.key)
    problems = list(req.problems)
    ro, rows_out, ep_turns, ep_obs = _play(ctx, [problems[g] for g in root_g], None, k_root, turns)
    # Candidates: per root, its sampled tokens' entropies in path order (never an observation).
    lengths = ro.response_mask.sum(-1)
    ent = np.zeros((len(root_g), max(int(lengths.max()), 1)))
    for r in range(len(root_g)):
        ent[r, : lengths[r]] = ro.entropy[r][ro.response_mask[r]]
    # The second pass: per group, the branch rows of its nodes, then the extra roots.
    second, parent, pos = [], [], []  # per second-pass row: group, root row, branch point
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
    if second:
        resume = [
            resume_at(ro, a, p, *((ep_turns[a], ep_obs[a]) if turns else ())) if a >= 0 else None
            for a, p in zip(parent, pos, strict=True)
        ]
        rows_out += _play(ctx, [problems[g] for g in second], resume, k_branch, turns)[1]
    # Request order: each group's roots, then its branch rows and extra roots; ids per group.
    order, info = [], {k: [] for k in TREE_FIELDS}
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
    groups = stack_rows([rows_out[r] for r in order], req.group_R, valid, problems)
    if not turns:  # an episode's reward is its environment's
        groups = verified(ctx, groups)
    tree = (info["branch_parent_B"], info["branch_pos_B"])
    info.update(groups.info, **tree_stats(groups.group, groups.rewards, *tree))
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
