"""Benchmark metrics over problems: avg@n, unbiased pass@k, maj@k, test pass rate.

Each metric is a mean over problems of a per-problem value, reported with its
standard error over problems (std with ddof=1 / sqrt(P); 0 for one problem)
and a 95% percentile bootstrap interval over problems (fixed seed, so a table
is reproducible). The average row of a suite is the unweighted mean of its
benchmarks (as papers print it), its standard error sqrt(sum se_b^2) / B
(benchmarks independent).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from rlvr_jax.train.evaluate import pass_at_k

BOOTSTRAP_RESAMPLES = 1000
MAJ_EXACT_SUBSETS = 2000  # enumerate the k-subsets when there are at most this many
MAJ_SAMPLED_SUBSETS = 500  # else average over this many random ones (fixed seed)


def estimate(per_problem_P, *, seed: int = 0) -> dict[str, float]:
    """{"value": mean, "se": standard error, "ci95": [lo, hi]} of per-problem values.

    Args:
      per_problem_P: [P] floats, one per problem.
      seed: the bootstrap's seed.
    """
    x = np.asarray(per_problem_P, np.float64)
    if x.size == 0:
        raise ValueError("no problems to average")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else 0.0
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(BOOTSTRAP_RESAMPLES, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"value": float(x.mean()), "se": se, "ci95": [float(lo), float(hi)]}


def majority(votes: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """Whether the most frequent non-None vote is correct (ties: the earliest sample's).

    Args:
      votes: each sample's answer key (None abstains).
      correct: each sample's correctness; a key's correctness is its first sample's.
    Returns:
      False when every sample abstains.
    """
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, v in enumerate(votes):
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
            first.setdefault(v, i)
    if not counts:
        return False
    best = max(counts, key=lambda v: (counts[v], -first[v]))
    return bool(correct[first[best]])


def maj_at_k(
    votes: Sequence[str | None], correct: Sequence[bool], k: int, *, seed: int = 0
) -> float:
    """maj@k of one problem: the chance that the majority of k of its n samples is correct.

    The k samples are a uniformly random subset of the n (order kept); the
    expectation is exact (all C(n, k) subsets) when there are at most
    MAJ_EXACT_SUBSETS, else a mean over MAJ_SAMPLED_SUBSETS random subsets.
    """
    n = len(votes)
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= k <= n; got k={k}, n={n}")
    if math.comb(n, k) <= MAJ_EXACT_SUBSETS:
        subsets = itertools.combinations(range(n), k)
    else:
        rng = np.random.default_rng(seed)
        subsets = (np.sort(rng.choice(n, k, replace=False)) for _ in range(MAJ_SAMPLED_SUBSETS))
    wins = [majority([votes[i] for i in s], [correct[i] for i in s]) for s in subsets]
    return float(np.mean(wins))


def benchmark_metrics(
    correct_PxN: np.ndarray,
    scores_PxN: np.ndarray,
    votes_PxN: Sequence[Sequence[str | None]] | None,
    ks: Sequence[int],
    *,
    seed: int = 0,
) -> dict[str, dict]:
    """All metrics of one benchmark from its per-sample verdicts.

    Args:
      correct_PxN: [P, n] bool, sample j of problem p is correct.
      scores_PxN: [P, n] float in [0, 1] (code: fraction of tests passed).
      votes_PxN: per problem, the n answer keys for maj@k; None: no maj@k (code).
      ks: the k of pass@k and maj@k, each 1 <= k <= n.
      seed: bootstrap and maj@k subset seed.
    Returns:
      {f"avg@{n}", f"pass@{k}"..., f"maj@{k}"... (unless votes is None),
      "test_pass_rate" (code only, i.e. when scores differ from correct)}, each an
      `estimate` dict.
    """
    correct_PxN = np.asarray(correct_PxN, bool)
    p, n = correct_PxN.shape
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"every k must be in [1, n={n}]; got {bad}")
    c_P = correct_PxN.sum(axis=1)
    out = {f"avg@{n}": estimate(c_P / n, seed=seed)}
    for k in ks:
        out[f"pass@{k}"] = estimate(pass_at_k(n, c_P, k), seed=seed)
    if votes_PxN is not None:
        for k in ks:
            per = [
                maj_at_k(v, c, k, seed=seed) for v, c in zip(votes_PxN, correct_PxN, strict=True)
            ]
            out[f"maj@{k}"] = estimate(per, seed=seed)
    else:
        out["test_pass_rate"] = estimate(np.asarray(scores_PxN, np.float64).mean(axis=1), seed=seed)
    return out


def pass_curve(correct_PxN: np.ndarray) -> list[float]:
    """Mean unbiased pass@k over problems for k = 1..n (the pass@k plot)."""
    correct_PxN = np.asarray(correct_PxN, bool)
    n = correct_PxN.shape[1]
    c_P = correct_PxN.sum(axis=1)
    return [float(np.mean(pass_at_k(n, c_P, k))) for k in range(1, n + 1)]


def average_row(per_benchmark: Sequence[dict[str, dict]]) -> dict[str, dict]:
    """The suite's average of each metric every benchmark has: mean value, sqrt(sum se^2)/B.

    Avg@n is averaged under the name of the first benchmark when n agrees.
    """
    names = set(per_benchmark[0])
    for m in per_benchmark[1:]:
        names &= set(m)
    b = len(per_benchmark)
    out = {}
    for name in sorted(names):
        values = [m[name]["value"] for m in per_benchmark]
        se = math.sqrt(sum(m[name]["se"] ** 2 for m in per_benchmark)) / b
        out[name] = {"value": float(np.mean(values)), "se": se}
    return out
