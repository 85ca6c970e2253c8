"""Pool schedulers across processes: one global scheduler, each host samples a slice.

A scheduler that keeps per-prompt statistics of a pool (SARA, VIGOR, PAIR, ...)
must see every host's results, or each host would learn from its own rows only
and the hosts would select different prompts. So in a multi-process run every
process runs the same scheduler over the global budget (all `prompts_per_step`
prompts) with the same key: every plan is the same on every host. Each host
samples its contiguous slice of a round's (padded) rows (`host_part`), the
results of all hosts are gathered (`distributed.allgather_objects`) and
concatenated in row order (`concat_outcomes`), and every scheduler observes the
same global outcomes, so the scheduler states stay identical. At the end each
host trains on its share of the selected groups (`host_selection`); rows it needs
that another host sampled are sent over (`exchange_rows`).

Everything here is host NumPy; the only collective is `allgather_objects`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr_jax import distributed
from rlvr_jax.scheduling import Outcomes, bucket_rows
from rlvr_jax.scheduling.base import Plan, Selection


def host_bucket(processes: int):
    """Round sizes that split into equal host slices: P · bucket_rows(ceil(rows / P))."""
    return lambda rows: processes * bucket_rows(-(-rows // processes))


def host_part(plan: Plan, index: int, processes: int) -> Plan:
    """Process `index`'s contiguous slice of a (padded) plan's rows, equal for every host.

    Args:
      plan: the round's plan; its row count must divide by `processes`.
      index, processes: this process and the process count.
    Returns:
      The plan restricted to rows [index·R/P, (index+1)·R/P).
    """
    if plan.num_rows % processes:
        raise ValueError(f"{plan.num_rows} plan rows do not split over {processes} processes")
    per = plan.num_rows // processes
    rows = slice(index * per, (index + 1) * per)
    return dataclasses.replace(
        plan,
        prompt_R=plan.prompt_R[rows],
        rollout_R=plan.rollout_R[rows],
        cont_R=plan.cont_R[rows],
        valid_R=plan.valid_R[rows],
    )


def concat_outcomes(parts: list[Outcomes]) -> Outcomes:
    """The outcomes of consecutive row slices as one (features kept if every part has them)."""
    feats = [p.features_RxF for p in parts]
    return Outcomes(
        np.concatenate([p.reward_R for p in parts]),
        np.concatenate([p.correct_R for p in parts]),
        np.concatenate([p.tokens_R for p in parts]),
        np.concatenate([p.finished_R for p in parts]),
        None if any(f is None for f in feats) else np.concatenate(feats),
    )


def host_groups(num_groups: int, index: int, processes: int) -> np.ndarray:
    """The selected groups process `index` trains on: its contiguous share of them."""
    return np.array_split(np.arange(num_groups), processes)[index]


def host_selection(sel: Selection, index: int, processes: int) -> Selection:
    """The global selection restricted to process `index`'s groups (renumbered from 0).

    Args:
      sel: the scheduler's selection (the same on every process).
      index, processes: this process and the process count.
    Returns:
      A Selection of this host's groups (stats: the global ones).
    """
    groups = host_groups(sel.num_groups, index, processes)
    lo = int(groups[0]) if len(groups) else 0
    keep = np.isin(sel.group_R, groups)
    return Selection(
        prompt_P=sel.prompt_P[groups],
        rollout_R=sel.rollout_R[keep],
        group_R=sel.group_R[keep] - lo,
        incl_prob_R=sel.incl_prob_R[keep],
        candidates_P=sel.candidates_P[groups],
        reward_R=sel.reward_R[keep],
        stats=sel.stats,
    )


def exchange_rows(rows: dict[int, dict], wanted: list[np.ndarray], index: int) -> dict[int, dict]:
    """Sends every host the complete rows it trains on that another host sampled.

    A collective (every process calls it with the same `wanted`).

    Args:
      rows: rollout id -> row; complete rows (with "reward") are the ones this host sampled
        or already received.
      wanted: per process, the rollout ids it trains on.
      index: this process.
    Returns:
      `rows` updated with the complete rows of `wanted[index]` from the other hosts.
    """
    mine = {int(i) for i in wanted[index]}
    others = {int(i) for j, w in enumerate(wanted) if j != index for i in w} - mine
    send = {i: rows[i] for i in others if i in rows and "reward" in rows[i]}
    for got in distributed.allgather_objects(send):
        rows.update({i: r for i, r in got.items() if i in mine})
    return rows


def share_round(part: Plan, local: Outcomes, rows: dict[int, dict]) -> Outcomes:
    """Gathers one round's outcomes from every host; shares unfinished prefixes (PAIR).

    A later round may continue a prefix on another host, so rows without a verdict
    yet travel with the outcomes.

    Args:
      part: this host's slice of the round's plan.
      local: the outcomes of this host's rows.
      rows: rollout id -> row, updated in place with the other hosts' prefixes.
    Returns:
      The outcomes of the whole round, in plan row order.
    """
    ids = part.rollout_R[part.valid_R & ~local.finished_R]
    prefixes = {int(i): rows[int(i)] for i in ids if "reward" not in rows[int(i)]}
    gathered = distributed.allgather_objects((local, prefixes))
    for _, p in gathered:
        for i, r in p.items():
            rows.setdefault(i, r)
    return concat_outcomes([o for o, _ in gathered])
