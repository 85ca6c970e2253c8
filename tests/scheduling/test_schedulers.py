"""Every scheduler: budgets respected, state is a pytree that round-trips, resume is exact."""

import dataclasses

import jax
import numpy as np
import pytest

from rlvr_jax import scheduling as S
from rlvr_jax.scheduling import sim

CONFIGS = [
    ("uniform", {}),
    ("dynamic_sampling", {}),
    ("difficulty", {}),
    ("difficulty", {"difficulty": "graph"}),
    ("sara", {}),
    ("sara", {"difficulty": "graph"}),
    ("vigor", {}),
    ("pair", {}),
    ("leeps", {}),
]
IDS = [n + ("+graph" if kw else "") for n, kw in CONFIGS]


def _pop():
    return sim.make_population(0, num_prompts=120, num_clusters=8, dim=6)


def _step(sched, state, step, budget, pop, log=None):
    sampler = sim.SimSampler(pop, seed=1000 + step, group_size=budget.group_size)

    def sample(plan):
        if log is not None:
            log.append(plan)
        return sampler(plan)

    return S.run_step(sched, state, jax.random.key(step), budget, sample)


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_allocations_never_exceed_budget(name, kw):
    pop = _pop()
    budget = S.Budget(groups=6, group_size=4, max_rollouts=40, max_rounds=6)
    sched = S.make_scheduler(name, **kw)
    state = sched.init(pop.pool(), budget)
    for step in range(4):
        plans = []
        state, sel = _step(sched, state, step, budget, pop, plans)
        assert sel.stats["rollouts"] <= budget.max_rollouts
        assert sel.stats["rounds"] <= budget.max_rounds
        fresh = sum(int(np.sum(p.valid_R & ~p.cont_R)) for p in plans)
        assert fresh == sel.stats["rollouts"]
        for p in plans:  # padded round sizes come from few buckets
            assert p.num_rows == S.bucket_rows(int(p.valid_R.sum()))
        assert len(np.unique(sel.rollout_R)) == len(sel.rollout_R)
        if name != "vigor":
            assert sel.num_groups <= budget.groups
        if name in ("dynamic_sampling", "sara"):  # only effective groups are kept
            for g in range(sel.num_groups):
                assert np.ptp(sel.reward_R[sel.group_R == g]) > 0


def test_vigor_spends_at_most_its_budget():
    pop = _pop()
    budget = S.Budget(groups=6, group_size=4, max_rollouts=200, max_rounds=8)
    sched = S.make_scheduler("vigor", budget_factor=1.5)
    state = sched.init(pop.pool(), budget)
    state, sel = _step(sched, state, 0, budget, pop)
    assert sel.stats["rollouts"] <= 1.5 * 6 * 4


def test_pair_continues_only_prefixes_and_logs_probabilities():
    pop = _pop()
    budget = S.Budget(groups=6, group_size=4, max_rollouts=24, max_rounds=4)
    sched = S.make_scheduler("pair", prefix_tokens=64, suffix_budget=0.3)
    state = sched.init(pop.pool(), budget)
    plans = []
    state, sel = _step(sched, state, 0, budget, pop, plans)
    assert plans[0].max_tokens == 64 and not plans[0].cont_R.any()
    if len(plans) > 1:
        assert plans[1].cont_R[plans[1].valid_R].all() and plans[1].max_tokens == 0
    assert np.all((sel.incl_prob_R >= 0.05 - 1e-6) & (sel.incl_prob_R <= 1))
    np.testing.assert_array_equal(sel.candidates_P, 4)


def test_unknown_names_list_choices():
    with pytest.raises(ValueError, match="valid: uniform"):
        S.make_scheduler("nope")
    with pytest.raises(ValueError, match="valid: beta, graph"):
        S.make_scheduler("sara", difficulty="nope")


@pytest.mark.parametrize("name,kw", CONFIGS, ids=IDS)
def test_state_round_trips_and_resume_is_exact(name, kw, tmp_path):
    pop = _pop()
    budget = S.Budget(groups=6, group_size=4, max_rollouts=64, max_rounds=6)
    sched = S.make_scheduler(name, **kw)
    state = sched.init(pop.pool(), budget)
    for step in range(3):
        state, _ = _step(sched, state, step, budget, pop)
    leaves, tree = jax.tree.flatten(state)
    assert all(isinstance(x, np.ndarray) for x in leaves)
    before = [x.copy() for x in leaves]
    S.save_state(str(tmp_path / "s.npz"), state)
    restored = S.load_state(str(tmp_path / "s.npz"), sched.init(pop.pool(), budget))
    assert jax.tree.structure(restored) == tree
    runs = []
    for start in (state, restored):
        s, sels = start, []
        for step in range(3, 5):
            s, sel = _step(sched, s, step, budget, pop)
            sels.append(sel)
        runs.append((s, sels))
    for a, b in zip(jax.tree.leaves(runs[0][0]), jax.tree.leaves(runs[1][0]), strict=True):
        np.testing.assert_array_equal(a, b)
    for x, y in zip(runs[0][1], runs[1][1], strict=True):
        for f in dataclasses.fields(x):
            np.testing.assert_array_equal(getattr(x, f.name), getattr(y, f.name))
    for a, b in zip(before, jax.tree.leaves(state), strict=True):  # schedulers are pure
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("others_rounds", [0, 2])
def test_lockstep_idles_through_other_processes_rounds(others_rounds):
    """A process whose scheduler is done repeats its last plan (unrecorded) while another
    process still samples; the selection is what the process alone would select."""
    pop = _pop()
    budget = S.Budget(groups=6, group_size=4, max_rollouts=400, max_rounds=6)
    sched = S.make_scheduler("uniform")
    state = sched.init(pop.pool(), budget)
    plans, idled, flags = [], [], []

    def agree(flag):  # OR with another process that samples `others_rounds` more rounds
        flags.append(flag)
        return flag or len(flags) <= len(plans) + others_rounds

    lockstep = S.Lockstep(agree, lambda plan, r: idled.append((plan, r)))
    sampler = sim.SimSampler(pop, seed=7, group_size=4)
    key = jax.random.key(0)
    alone = S.run_step(sched, state, key, budget, sim.SimSampler(pop, seed=7, group_size=4))[1]
    _, sel = S.run_step(
        sched, state, key, budget, lambda p: plans.append(p) or sampler(p), lockstep=lockstep
    )
    assert len(plans) == 1  # uniform proposes once
    assert [r for _, r in idled] == list(range(1, 1 + others_rounds))  # the rounds' keys
    assert all(p is plans[-1] for p, _ in idled)
    assert flags == [True] + [False] * (others_rounds + 1)  # one agreement per round
    np.testing.assert_array_equal(sel.rollout_R, alone.rollout_R)
    np.testing.assert_array_equal(sel.reward_R, alone.reward_R)
