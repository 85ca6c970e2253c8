"""CBPO's branching inside a model turn of multi-turn tool episodes (tool_lookup).

A branch copies its parent episode's exact path up to a sampled token (earlier
turns and the tool results between them included), is sampled from there, and
its episode continues with tool calls. Each test fails on a faked tree: copies
are compared with the parent's tokens, the continuation's μ with teacher
forcing on the copied prefix, branch points with the parent's sampled tokens.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.core import advantages as adv_lib
from rlvr_jax.core import cbpo
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import credit, signals
from rlvr_jax.rl.methods.branch_signals import tree_layout
from rlvr_jax.rollout import ROLLOUTS
from rlvr_jax.rollout.multiturn import Resume, run_episodes
from rlvr_jax.sampling import SamplingParams
from rlvr_jax.testing import parity_tool_episodes
from rlvr_jax.tokenizers import cut_at_stop
from tests.rollout.common import TOK, rollout_ctx

HP = dict(ROLLOUTS.get("branching").defaults)
G = 8
TURN_TOKENS = 10
_logps = nnx.jit(token_logps)


def _task():
    return tasks.get("tool_lookup", num_lookups=1, max_name_syllables=1, instructions=False)


def _ctx(policy, counts, key=0):
    """A tool-episode rollout context (the episode task and turn budget)."""
    return rollout_ctx(policy, _task(), counts, key, TURN_TOKENS)


@pytest.fixture(scope="module")
def branched(policy):
    """Two groups of G episodes (parity rewards), roots and branches, with every turn kept."""
    with pytest.MonkeyPatch.context() as mp:
        parity_tool_episodes(mp)
        ctx = _ctx(policy, [G, G])
        return ctx, ROLLOUTS.get("branching").fn(ctx, **dict(HP, entropy_frac=0.5))


def _path(out, r):
    """(tokens after the prompt, which of them were sampled) of row r."""
    after = out.attention_mask[r] & ~out.prompt_mask[r]
    return out.tokens[r][after], out.response_mask[r][after]


def _turn_runs(sampled):
    """[start, end) of each model turn (maximal run of sampled tokens) in a path."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], sampled.astype(int), [0]])))
    return list(zip(edges[::2], edges[1::2], strict=True))


def test_branches_copy_the_parent_episode_up_to_a_sampled_token(policy, branched):
    model, _ = policy
    ctx, out = branched
    parent, pos = out.info["branch_parent_B"], out.info["branch_pos_B"]
    is_branch = parent >= 0
    assert is_branch.sum() == 2 * 6  # 2 roots per group of 8, 3 nodes of 2 branches
    in_later_turn = 0
    for r in np.flatnonzero(is_branch):
        a = G * (r // G) + parent[r]
        assert parent[a] < 0
        path, sampled = _path(out, r)
        ppath, psampled = _path(out, a)
        at = int(np.flatnonzero(psampled)[pos[r]])  # the parent's pos-th sampled token
        # The copy is the parent's exact path before its branch point, tool results included,
        # and it is context: the branch's first response token is the one after it.
        np.testing.assert_array_equal(path[:at], ppath[:at])
        assert not sampled[:at].any() and sampled[at]
        assert psampled[at]  # the branch point is a token the policy sampled, never a tool's
        in_later_turn += bool((~psampled[:at]).any())  # an observation lies before it
        # The turn holding the branch point holds at most the per-turn budget.
        model_tokens = sampled.copy()  # the parent's sampled tokens in the copy, then its own
        model_tokens[:at] = psampled[:at]
        assert all(hi - lo <= TURN_TOKENS for lo, hi in _turn_runs(model_tokens))
        assert out.info["turns_B"][r] <= ctx.task.episode_turns()
    assert in_later_turn > 0, "some branch should sit in a turn after a tool result"
    assert (out.info["turns_B"] > 1).all()  # every episode continued with tool turns
    # Every sampled token's μ is the policy's under teacher forcing on its row's context
    # (the copied prefix, tool results and all): branches were sampled after their copy.
    want = np.asarray(_logps(model, out.tokens, out.attention_mask))
    m = out.response_mask
    np.testing.assert_allclose(out.behaviour_logps[m], want[m], atol=2e-4)
    assert (out.behaviour_logps[~m] == 0).all()
    # Siblings of a node continue differently somewhere (sampled, not copied).
    conts = {}
    for r in np.flatnonzero(is_branch):
        conts.setdefault((r // G, parent[r], pos[r]), []).append(tuple(_path(out, r)[0]))
    assert any(len(set(v)) > 1 for v in conts.values())
    # Parity rewards: some node groups disagree, so CBPO has contrast to use.
    assert np.nanmax(out.info["node_cbv_B"]) > 0
    assert out.correct.any() and not out.correct.all()


def test_a_resumed_episode_replays_its_environment_and_continues(policy, monkeypatch):
    """run_episodes with a Resume: same observations for the copied turns, then new turns."""
    parity_tool_episodes(monkeypatch)
    _, sampler = policy
    task = _task()
    params = SamplingParams(max_new_tokens=TURN_TOKENS, stop_token_ids=TOK.stop_ids)
    problem = task.problems(1, "train")
    key = jax.random.PRNGKey(5)
    root = run_episodes(sampler, TOK, problem, task.env, params, key, max_turns=5)
    assert root.num_turns[0] >= 3
    path, sampled = _path(root.rollout, 0)
    runs = _turn_runs(sampled)
    lo, hi = runs[1]  # resume inside the second turn, after its first token
    assert hi - lo >= 2
    resume = Resume(path[: lo + 1].tolist(), root.turns[0][:1], root.observations[0][:1], lo)
    ep = run_episodes(sampler, TOK, problem, task.env, params, key, max_turns=5, resume=[resume])
    assert ep.turns[0][0] == root.turns[0][0]
    assert ep.observations[0][0] == root.observations[0][0]
    got, got_sampled = _path(ep.rollout, 0)
    np.testing.assert_array_equal(got[: lo + 1], path[: lo + 1])
    assert not got_sampled[: lo + 1].any()
    # The resumed turn's text starts with the copied token, then what was sampled after it.
    end = _turn_runs(got_sampled)[0][1]
    assert ep.turns[0][1] == TOK.decode(cut_at_stop(got[lo:end].tolist(), TOK.stop_ids))
    assert 1 <= end - (lo + 1) <= TURN_TOKENS - 1  # the turn keeps its budget
    bad = Resume(path[: lo + 1].tolist(), ["answer: 7"], root.observations[0][:1], lo)
    with pytest.raises(ValueError, match="deterministic environment"):
        run_episodes(sampler, TOK, problem, task.env, params, key, max_turns=5, resume=[bad])


def test_branch_budget_never_exceeds_its_cap_on_episodes(policy, monkeypatch):
    parity_tool_episodes(monkeypatch)
    ctx = _ctx(policy, [6, 3], key=3)
    out = ROLLOUTS.get("branching").fn(ctx, **dict(HP, roots=0.5, max_branches=2, width=1))
    np.testing.assert_array_equal(np.bincount(out.group, minlength=2), [6, 3])
    for g, n in enumerate([6, 3]):
        branches = (out.info["branch_parent_B"][out.group == g] >= 0).sum()
        assert branches <= min(n - int(np.ceil(0.5 * n)), 2)
    assert (out.info["branch_parent_B"] >= 0).any()


def _credits(out, perm):
    """{(row, path position): CBPO credit} of every response token, rows in `perm` order."""
    p = np.asarray(perm)
    mask = out.response_mask[p]
    rewards = out.rewards[p]
    a = np.asarray(adv_lib.grpo_advantages(rewards, out.group[p], out.num_groups))
    adv = np.where(mask, a[:, None], 0.0).astype(np.float32)
    info = {k: out.info[k][p] for k in ("branch_id_B", "branch_parent_B", "branch_pos_B")}
    member, pos, start, offset, shared = tree_layout(
        out.group[p], *info.values(), np.ones(len(p), bool), max_nodes=len(p)
    )
    got, _ = cbpo.cbpo_advantages(
        adv, mask, rewards, member, pos, start, valid_K=pos >= 0, offset_B=offset,
        shared_BxB=shared,
    )  # fmt: skip
    got = np.asarray(got)
    held = {}
    for i in range(len(p)):
        for j, t in enumerate(np.flatnonzero(mask[i])):
            held[(int(p[i]), int(offset[i]) + j)] = float(got[i, t])
    return held


def test_tree_credit_on_episodes_is_order_free_and_skips_tool_tokens(branched):
    ctx, out = branched
    # The trainer's path: batch, the "branch_tree" signal, GRPO, then the "cbpo" transform.
    b = batch_lib.from_groups(out)
    b = b.with_extra(signals.SIGNALS.get("branch_tree").fn(None, out, b))
    entry = credit.ESTIMATORS.get("grpo")
    a, _ = entry.fn(b.rewards_B, b.group_B, b.valid_B, b.mask_BxT, num_groups=2,
                    values_BxT=None, **entry.defaults)  # fmt: skip
    hp = {"cbpo": credit.TRANSFORMS.get("cbpo").defaults}
    got = np.asarray(credit.apply_transforms(["cbpo"], np.asarray(a), b, hp))
    tool = out.attention_mask & ~out.prompt_mask & ~out.response_mask
    assert tool.any() and (got[tool] == 0).all()  # tool results and copies: no credit
    assert (got[~out.response_mask] == 0).all()
    # A branch's copy of its parent's path is credited on the parent alone, once.
    parent, pos = out.info["branch_parent_B"], out.info["branch_pos_B"]
    base = _credits(out, np.arange(len(out.group)))
    for r in np.flatnonzero(parent >= 0):
        a_row = G * (r // G) + parent[r]
        assert all((r, q) not in base for q in range(pos[r]))
        assert all((a_row, q) in base for q in range(pos[r]))
    # Same token credits whatever the row order.
    rng = np.random.default_rng(0)
    for _ in range(3):
        perm = rng.permutation(len(out.group))
        again = _credits(out, perm)
        assert again.keys() == base.keys()
        np.testing.assert_allclose([again[k] for k in base], list(base.values()), atol=1e-6)
    assert any(abs(v) > 0 for v in base.values())
