"""The trainer's rollout/* statistics of Groups.info: quantities averaged, labels left out."""

from __future__ import annotations

import numpy as np

from rlvr_jax.rl.step_metrics import info_stats
from rlvr_jax.rollout import Groups


def _groups(info: dict) -> Groups:
    r, length = 4, 3
    z = np.zeros((r, length), np.int32)
    return Groups(
        tokens=z,
        attention_mask=z.astype(bool),
        prompt_mask=z.astype(bool),
        response_mask=z.astype(bool),
        behaviour_logps=z.astype(np.float32),
        entropy=z.astype(np.float32),
        group=np.array([0, 0, 1, 1], np.int32),
        valid=np.array([True, True, True, False]),
        rewards=np.array([1.0, 0.0, 0.5, 9.0], np.float32),
        correct=np.array([True, False, False, True]),
        stopped=np.ones(r, bool),
        reasons=[""] * r,
        problems=[None, None],
        info=info,
    )


def test_quantities_are_averaged_over_valid_finite_rows_and_labels_are_not_logged():
    stats = info_stats(
        _groups(
            {
                "turns_B": np.array([1.0, 3.0, np.nan, 100.0]),
                "guided_B": np.array([True, False, True, True]),
                "branch_id_B": np.array([0, 1, 0, 1]),
                "branch_parent_B": np.array([-1, 0, -1, 0]),
                "branch_pos_B": np.array([0, 4, 0, 2]),
                "subgroup_B": np.array([0, 1, 2, 3]),
            }
        )
    )
    assert stats["rollout/turns"] == 2.0  # NaN and the invalid row left out
    assert stats["rollout/branch_pos"] == 4 / 3
    assert stats["rollout/guided"] == 2 / 3 and stats["rollout/guided_groups"] == 2
    assert stats["rollout/guided_reward"] == 0.75 and stats["rollout/guided_pass_rate"] == 0.5
    assert stats["rollout/not_guided_reward"] == 0.0
    for label in ("branch_id", "branch_parent", "subgroup"):
        assert not any(k.startswith(f"rollout/{label}") for k in stats), label
