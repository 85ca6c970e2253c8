"""Select stage: which sampled groups an RL step trains on.

  uniform           one round: the next B prompts of the pipeline, G rollouts each.
  dynamic_sampling  DAPO: drop groups whose rewards are all equal (zero advantage,
                    no gradient), sample the next B prompts, and repeat until B
                    informative groups are kept or `max_rounds` rounds have run
                    (the cap; a short batch is padded with masked-out groups and
                    the shortfall is logged).

The adaptive allocation schedulers (SARA, VIGOR, PAIR, LEEPS, difficulty
prediction, graph difficulty) carry state across steps and run in
`rlvr_jax.rl.scheduled` instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlvr_jax.rl.rollout import Groups, concat, pad_groups

SELECTORS = ("uniform", "dynamic_sampling")


def collect_groups(
    draw: Callable[[int], Groups],
    *,
    num_groups: int,
    group_size: int,
    mode: str,
    max_rounds: int = 1,
) -> tuple[Groups, dict[str, float]]:
    """Runs the select stage for one RL step.

    Args:
      draw: `draw(round) -> Groups` samples and scores the next B prompts.
      num_groups: B, groups in the training batch.
      group_size: G.
      mode: one of SELECTORS.
      max_rounds: dynamic_sampling's cap on sampling rounds.
    Returns:
      (groups, stats): exactly B groups (padding groups have valid = False) and
      statistics over every sampled round: sampled_groups, zero_variance_groups
      (fraction), kept_groups, rounds, and pass_rate / reward over all samples.
    """
    if mode not in SELECTORS:
        raise ValueError(f"unknown select mode {mode!r}; valid: {', '.join(SELECTORS)}")
    rounds = max_rounds if mode == "dynamic_sampling" else 1
    kept: list[Groups] = []
    num_kept = sampled = zero_var = 0
    rewards, correct = [], []
    for r in range(rounds):
        groups = draw(r)
        informative = groups.informative()
        sampled += groups.num_groups
        zero_var += int((~informative).sum())
        rewards.append(groups.rewards[groups.valid])
        correct.append(groups.correct[groups.valid])
        if mode == "uniform":
            kept.append(groups)
            num_kept = groups.num_groups
            break
        keep = np.flatnonzero(informative)[: num_groups - num_kept]
        if keep.size:
            kept.append(groups.take_groups(keep))
            num_kept += keep.size
        if num_kept >= num_groups:
            break
    if kept:
        batch = pad_groups(concat(kept), num_groups, group_size)
    else:  # every sampled group was uninformative: keep the shape, train on nothing
        batch = groups.take_groups(np.arange(num_groups))
        batch.valid = np.zeros_like(batch.valid)
    stats = {
        "sampled_groups": float(sampled),
        "zero_variance_groups": zero_var / max(sampled, 1),
        "kept_groups": float(num_kept if mode == "dynamic_sampling" else num_groups),
        "rounds": float(r + 1),
        "reward": float(np.mean(np.concatenate(rewards))),
        "pass_rate": float(np.mean(np.concatenate(correct))),
    }
    return batch, stats
