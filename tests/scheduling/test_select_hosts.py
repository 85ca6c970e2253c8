"""Pool schedulers across processes: the host slices of a plan and of a selection."""

import numpy as np

from rlvr_jax.scheduling import Outcomes, Plan, Selection, select_hosts


def _plan(rows):
    r = np.arange(rows)
    return Plan(0, prompt_R=r // 2, rollout_R=r, cont_R=np.zeros(rows, bool)).padded(8)


def test_host_bucket_splits_rounds_into_equal_slices():
    bucket = select_hosts.host_bucket(2)
    assert [bucket(r) for r in (1, 8, 9, 17, 40)] == [16, 16, 16, 32, 64]
    assert all(bucket(r) % 2 == 0 and bucket(r) >= r for r in range(1, 100))


def test_host_parts_tile_the_plan_and_outcomes_concatenate_in_row_order():
    plan = _plan(5)
    parts = [select_hosts.host_part(plan, i, 2) for i in range(2)]
    assert [p.num_rows for p in parts] == [4, 4]
    np.testing.assert_array_equal(np.concatenate([p.rollout_R for p in parts]), plan.rollout_R)
    np.testing.assert_array_equal(np.concatenate([p.valid_R for p in parts]), plan.valid_R)
    outs = [
        Outcomes(p.rollout_R * 1.0, p.valid_R, p.rollout_R, p.valid_R, p.rollout_R[:, None] * 1.0)
        for p in parts
    ]
    got = select_hosts.concat_outcomes(outs)
    np.testing.assert_array_equal(got.reward_R, plan.rollout_R)
    assert got.features_RxF.shape == (8, 1)


def test_host_selections_are_disjoint_and_cover_the_selection():
    group = np.repeat(np.arange(5), 2)
    sel = Selection(
        prompt_P=np.array([7, 3, 9, 1, 4]),
        rollout_R=np.arange(10) + 100,
        group_R=group,
        incl_prob_R=np.ones(10, np.float32),
        candidates_P=np.full(5, 2),
        reward_R=np.arange(10, dtype=np.float32),
        stats={"rounds": 1.0},
    )
    parts = [select_hosts.host_selection(sel, i, 2) for i in range(2)]
    assert [p.prompt_P.tolist() for p in parts] == [[7, 3, 9], [1, 4]]
    np.testing.assert_array_equal(np.concatenate([p.rollout_R for p in parts]), sel.rollout_R)
    assert parts[1].group_R.tolist() == [0, 0, 1, 1]  # renumbered from 0 on each host


def test_exchange_rows_in_one_process_keeps_the_rows():
    rows = {1: {"reward": 1.0}, 2: {"reward": 0.0}}
    assert select_hosts.exchange_rows(dict(rows), [np.array([1, 2])], 0) == rows
