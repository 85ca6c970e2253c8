"""A step's statistics: the update's metrics reduced over its updates, and the rollout's.

`reduce_update_metrics` turns the metrics of a step's updates into the logged
ones. `rollout_stats` and `info_stats` summarise the step's groups, and
`combine_select_stats` the select stage's statistics, over every process.
"""

from __future__ import annotations

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.rollout import Groups
from rlvr_jax.rollout.groups import LABEL_FIELDS
from rlvr_jax.scheduling.select import COUNT_STATS

# How a per-token diagnostic of the update is logged, where not under its own name.
LOGGED_AS = {
    "ratio": "ratio_mean",
    "clip_low": "clip_low_frac",
    "clip_high": "clip_high_frac",
    "dual_clip": "dual_clip_frac",
}


def _add(totals: dict, metrics: dict) -> None:
    """totals += metrics, key by key, nested dicts alike (in the order updates come)."""
    for key, v in metrics.items():
        if isinstance(v, dict):
            _add(totals.setdefault(key, {}), v)
        else:
            totals[key] = totals.get(key, 0.0) + float(v)


def reduce_update_metrics(updates: list[dict]) -> dict[str, float]:
    """The step's metrics from those of its updates (`rl.update.make_update`'s, in order).

    A scalar (loss, grad_norm, value_loss, ...) is its mean over the updates; a
    per-token diagnostic ("token_sums") its sum over every update's tokens divided
    by their count, logged as `LOGGED_AS` says; a per-subset one ("subset_sums")
    its sum over the subset's tokens divided by their count, logged as
    "name@subset" (absent when the step had no such token).
    """
    totals: dict = {}
    for metrics in updates:
        _add(totals, metrics)
    token_sums = totals.pop("token_sums", {})
    subset_sums = totals.pop("subset_sums", {})
    out = {k: v / len(updates) for k, v in totals.items()}
    tokens = max(token_sums.pop("tokens", 0.0), 1.0)
    out.update({LOGGED_AS.get(k, k): v / tokens for k, v in token_sums.items()})
    for subset, sums in subset_sums.items():
        count = sums.pop("tokens")
        if count:
            out.update({f"{k}@{subset}": v / count for k, v in sums.items()})
    return out


def combine_select_stats(stats: dict[str, float]) -> dict[str, float]:
    """The select stage's statistics over every process's groups.

    Counts (`select.COUNT_STATS`) add up; the rest (reward, pass_rate, rounds) are
    means over equally many rows per process (each samples its equal share of
    prompts), so their mean over processes is the global mean.
    """
    if jax.process_count() == 1:
        return stats
    keys = sorted(stats)
    total = distributed.sum_over_processes(np.array([stats[k] for k in keys], np.float64))
    n = jax.process_count()
    return {k: float(v if k in COUNT_STATS else v / n) for k, v in zip(keys, total, strict=True)}


def rollout_stats(groups: Groups, max_new_tokens: int) -> dict[str, float]:
    """Response length, truncation, entropy over the valid rows of every process."""
    valid = groups.valid
    lengths = groups.lengths[valid]
    ent = groups.entropy[valid][groups.response_mask[valid]]
    local = [
        lengths.size,
        lengths.sum(),
        (~groups.stopped[valid]).sum(),
        (lengths >= max_new_tokens).sum(),
        ent.size,
        ent.sum(dtype=np.float64),
    ]
    rows, length, truncated, at_max, tokens, ent_sum = distributed.sum_over_processes(
        np.array(local, np.float64)
    )
    return {
        "response_len": float(length / rows) if rows else 0.0,
        "truncated_frac": float(truncated / rows) if rows else 0.0,
        "entropy": float(ent_sum / tokens) if tokens else 0.0,
        "max_len_frac": float(at_max / rows) if rows else 0.0,
    }


def info_stats(groups: Groups) -> dict[str, float]:
    """The rollout plug-in's per-row reports (`Groups.info`) over every process's valid rows.

    A bool field `x_B` gives rollout/x (share of rows), rollout/x_groups (groups
    with such a row) and the reward / pass rate of its rows and of the others
    (rollout/x_reward, rollout/x_pass_rate, rollout/not_x_reward,
    rollout/not_x_pass_rate); another field gives its mean over the rows where it
    is finite (rollout/turns; CBPO's branches_per_root_B is NaN on branch rows).
    Row labels (`groups.LABEL_FIELDS`: branch ids, sub-group ids) give nothing.
    """
    v = groups.valid
    out = {}
    for name, values in sorted(groups.info.items()):
        if name in LABEL_FIELDS:
            continue
        key = "rollout/" + name.removesuffix("_B")
        x = np.asarray(values)[v]
        if x.ndim != 1:  # not one number per row (e.g. GRSD's guidance_ids_BxN)
            continue
        if x.dtype != bool:  # the mean over the rows it applies to (NaN elsewhere)
            x = x[np.isfinite(x)]
            n, s = distributed.sum_over_processes(np.array([x.size, x.sum()], np.float64))
            out[key] = float(s / n) if n else 0.0
            continue
        r, ok = groups.rewards[v], groups.correct[v]
        grp = np.unique(groups.group[v][x])
        local = [x.size, x.sum(), grp.size, r[x].sum(), ok[x].sum(), r[~x].sum(), ok[~x].sum()]
        rows, n, n_groups, r1, ok1, r0, ok0 = distributed.sum_over_processes(
            np.array(local, np.float64)
        )
        out.update({key: float(n / rows) if rows else 0.0, key + "_groups": float(n_groups)})
        for prefix, count, rs, oks in (("", n, r1, ok1), ("not_", rows - n, r0, ok0)):
            k = "rollout/" + prefix + name.removesuffix("_B")
            out.update({k + "_reward": float(rs / count) if count else 0.0})
            out.update({k + "_pass_rate": float(oks / count) if count else 0.0})
    return out
