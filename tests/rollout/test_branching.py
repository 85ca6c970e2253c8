"""CBPO's branching rollout: branches continue their parent's exact prefix, sampled after it.

Each test fails on a faked tree (independent samples labelled as branches): the
copied prefix, the continuation's log-probs under teacher forcing with that
prefix, the budget, and the node choice are all checked against what was sampled.
"""

import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rollout import ROLLOUTS, score
from rlvr_jax.rollout.branching import choose_nodes, tree_stats
from rlvr_jax.testing import parity_score_rows
from tests.rollout.common import rollout_ctx

_logps = nnx.jit(token_logps)
HP = dict(ROLLOUTS.get("branching").defaults)


def _ctx(policy, counts, key=0, max_new_tokens=10, task=None):
    return rollout_ctx(policy, task or tasks.get("arithmetic"), counts, key, max_new_tokens)


@pytest.fixture(scope="module")
def branched(policy):
    """One branching rollout of two groups of 8 (parity rewards), and what was verified."""
    seen = []

    def record(task, tokenizer, problems_R, sampled_R, stop_ids):
        seen.extend(list(s) for s in sampled_R)
        return parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(score, "score_rows", record)
        ctx = _ctx(policy, [8, 8])
        return ctx, ROLLOUTS.get("branching").fn(ctx, **HP), seen


def test_branches_copy_the_parent_prefix_and_are_sampled_after_it(policy, branched):
    model, _ = policy
    ctx, out, seen = branched
    parent, pos, ids = (out.info[k] for k in ("branch_parent_B", "branch_pos_B", "branch_id_B"))
    np.testing.assert_array_equal(ids, np.tile(np.arange(8), 2))
    is_branch = parent >= 0
    # Defaults: 2 roots per group of 8, then 3 nodes of 2 branches (every root is long enough).
    assert is_branch.sum() == 12 and (pos[is_branch] >= 1).all()
    after = out.attention_mask & ~out.prompt_mask
    forced = after & ~out.response_mask
    for r in np.flatnonzero(is_branch):
        a = 8 * (r // 8) + parent[r]
        assert parent[a] < 0  # one level: branches hang on roots
        path, parent_path = out.tokens[r][after[r]], out.tokens[a][out.response_mask[a]]
        np.testing.assert_array_equal(path[: pos[r]], parent_path[: pos[r]])  # exact copy
        assert forced[r].sum() == pos[r]  # the copy is context, the rest was sampled
        np.testing.assert_array_equal(out.tokens[r][forced[r]], parent_path[: pos[r]])
        assert after[r].sum() <= ctx.sampling.max_new_tokens  # no path longer than a root's
        assert seen[r] == path.tolist()  # verified on the whole path
    assert not forced[~is_branch].any()
    # The continuation's μ is the policy's under teacher forcing with the copied prefix.
    want = np.asarray(_logps(model, out.tokens, out.attention_mask))
    m = out.response_mask
    np.testing.assert_allclose(out.behaviour_logps[m], want[m], atol=2e-4)
    assert (out.behaviour_logps[~m] == 0).all()
    # Branches were sampled, not copied: siblings of a node continue differently somewhere.
    conts = {}
    for r in np.flatnonzero(is_branch):
        conts.setdefault((r // 8, parent[r], pos[r]), []).append(out.tokens[r][m[r]].tolist())
    assert any(len({tuple(c) for c in v}) > 1 for v in conts.values())


def test_branch_points_are_high_entropy_positions_of_the_parent(branched):
    ctx, out, _ = branched
    parent, pos = out.info["branch_parent_B"], out.info["branch_pos_B"]
    for g in range(2):
        rows = np.arange(8 * g, 8 * g + 8)
        roots = rows[parent[rows] < 0]
        ent = [out.entropy[r][out.response_mask[r]] for r in roots]
        cands = np.sort(np.concatenate([e[1:] for e in ent]))[::-1]
        cut = cands[int(np.ceil(HP["entropy_frac"] * len(cands))) - 1]
        for r in rows[parent[rows] >= 0]:
            assert ent[parent[r]][pos[r]] >= cut - 1e-6  # screened by entropy


def test_tree_stats_are_logged_per_root_and_per_node(branched):
    _, out, _ = branched
    per_root, cbv = out.info["branches_per_root_B"], out.info["node_cbv_B"]
    branch = out.info["branched_B"]
    assert np.isnan(per_root[branch]).all() and np.isnan(cbv[~branch]).all()
    np.testing.assert_allclose(np.nanmean(per_root), 3.0)  # 6 branches on 2 roots
    # A node's CBV: population std of its parent's and its branches' rewards.
    for r in np.flatnonzero(branch):
        g = r // 8
        node = [8 * g + out.info["branch_parent_B"][r]]
        node += [
            q for q in range(8 * g, 8 * g + 8)
            if out.info["branch_parent_B"][q] == out.info["branch_parent_B"][r]
            and out.info["branch_pos_B"][q] == out.info["branch_pos_B"][r]
        ]  # fmt: skip
        np.testing.assert_allclose(cbv[r], np.std(out.rewards[node]), rtol=1e-6)
        assert out.info["node_contrast_B"][r] == float(cbv[r] > 0)
    assert np.isnan(out.info["node_contrast_B"][~branch]).all()
    got = tree_stats([0] * 4, [1, 0, 0, 1], [-1, 0, 0, -1], [0, 2, 2, 0])
    want = np.std([1, 0, 0])
    np.testing.assert_allclose(got["node_cbv_B"], [np.nan, want, want, np.nan], rtol=1e-6)
    np.testing.assert_allclose(got["branches_per_root_B"], [2, np.nan, np.nan, 0])


def test_budget_never_exceeds_its_cap_and_every_group_keeps_its_rows(policy, monkeypatch):
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    ctx = _ctx(policy, [6, 3, 1], key=3, max_new_tokens=6)
    for cap, width in [(2, 1), (3, 2), (0, 1)]:
        hp = dict(HP, roots=0.5, max_branches=cap, width=width)
        out = ROLLOUTS.get("branching").fn(ctx, **hp)
        counts = np.bincount(out.group, minlength=3)
        np.testing.assert_array_equal(counts, [6, 3, 1])
        for g, n in enumerate([6, 3, 1]):
            branches = (out.info["branch_parent_B"][out.group == g] >= 0).sum()
            budget = n - int(np.ceil(0.5 * n))
            assert branches <= (min(budget, cap) if cap else budget)
            assert branches % width == 0


def test_choose_nodes_screens_by_entropy_and_decays_along_paths_and_positions():
    h = np.array([[0.0, 5.0, 4.2, 1.0, 0.5, 0.0], [0.0, 4.0, 0.1, 3.0, 0.2, 0.0]])
    lengths = np.array([6, 6])
    kw = dict(entropy_frac=1.0, path_decay=1.0, node_decay=0.0)
    # No decay: the highest-entropy positions; position 0 (the prompt itself) never.
    assert choose_nodes(h, lengths, num_nodes=3, **kw) == [(0, 1), (0, 2), (1, 1)]
    # Node decay β: a chosen node's neighbours are damped (4.2·(1 − .5) < 3·(1 − .5²) < 4).
    kw["node_decay"] = 0.5
    assert choose_nodes(h, lengths, num_nodes=3, **kw) == [(0, 1), (1, 1), (1, 3)]
    # Path decay α: a path with a node is damped (4.2·.1 < 4).
    kw.update(node_decay=0.0, path_decay=0.1)
    assert choose_nodes(h, lengths, num_nodes=2, **kw) == [(0, 1), (1, 1)]
    # Screening keeps the top fraction only: 20% of 10 candidates = 2 (5.0, 4.2).
    kw.update(entropy_frac=0.2, path_decay=1.0)
    assert choose_nodes(h, lengths, num_nodes=4, **kw) == [(0, 1), (0, 2)]
    # Short rows have no candidates; a chosen node is never chosen twice.
    assert choose_nodes(h, np.array([1, 0]), num_nodes=2, **kw) == []
    got = choose_nodes(np.ones((1, 3)), np.array([3]), num_nodes=5, entropy_frac=1.0,
                       path_decay=1.0, node_decay=0.5)  # fmt: skip
    assert sorted(got) == [(0, 1), (0, 2)]


def test_branching_refuses_prefixes(policy):
    import dataclasses

    ctx = _ctx(policy, [2])
    bad = dataclasses.replace(ctx, request=dataclasses.replace(ctx.request, prefixes=[None] * 2))
    with pytest.raises(ValueError, match="'branching' cannot continue prefixes"):
        ROLLOUTS.get("branching").fn(bad, **HP)
    overlong = dataclasses.replace(ctx, task=tasks.get("tool_lookup"), overlong_cache=4)
    with pytest.raises(ValueError, match="overlong_cache"):  # one response's length: no episodes
        ROLLOUTS.get("branching").fn(overlong, **HP)
