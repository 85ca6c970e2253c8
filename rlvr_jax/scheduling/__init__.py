"""Rollout allocation and prompt selection schedulers (the select stage's stateful plug-ins).

Protocol and host loop: rlvr_jax.scheduling.base (`run_step`). Registry:

  uniform              B random prompts, G rollouts each
  dynamic_sampling     DAPO: keep groups with 0 < #correct < G, refill (capped)
  difficulty           difficulty-prediction sampling (Beta posterior near a target)
  sara                 probe, then commit / abandon by P(effective) (Beta-Binomial)
  vigor                few rollouts for all, more to the highest reward variance
  pair                 prefixes, predicted continuation design, pair-inclusion weights
  leeps                exploit / explore portfolios split by non-trivial ratios

Any scheduler with an `estimator` field takes `estimators.GraphEstimator()`
(graph_difficulty) in place of the per-prompt Beta posterior.
"""

from __future__ import annotations

from rlvr_jax.scheduling.base import (
    Budget,
    Lockstep,
    Outcomes,
    Plan,
    Pool,
    Selection,
    bucket_rows,
    load_state,
    run_step,
    save_state,
)
from rlvr_jax.scheduling.common import DifficultyPrediction, DynamicSampling, Uniform
from rlvr_jax.scheduling.estimators import BetaEstimator, GraphEstimator, make_estimator
from rlvr_jax.scheduling.leeps import LEEPS
from rlvr_jax.scheduling.pair import PAIR
from rlvr_jax.scheduling.sara import SARA
from rlvr_jax.scheduling.vigor import VIGOR

SCHEDULERS = {
    "uniform": Uniform,
    "dynamic_sampling": DynamicSampling,
    "difficulty": DifficultyPrediction,
    "sara": SARA,
    "vigor": VIGOR,
    "pair": PAIR,
    "leeps": LEEPS,
}


def make_scheduler(name: str, difficulty: str | None = None, difficulty_options=None, **kwargs):
    """A scheduler by registry name.

    Args:
      name: one of SCHEDULERS.
      difficulty: optional estimator name ("beta" or "graph") for schedulers
        with an `estimator` field; None keeps the scheduler's default.
      difficulty_options: the estimator's hyperparameters (dataclass fields of
        estimators.ESTIMATORS[difficulty]); only with `difficulty`.
      **kwargs: the scheduler's hyperparameters (dataclass fields).
    Returns:
      The scheduler object.
    """
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; valid: {', '.join(SCHEDULERS)}")
    if difficulty is not None:
        kwargs["estimator"] = make_estimator(difficulty, **(difficulty_options or {}))
    elif difficulty_options:
        raise ValueError("make_scheduler: difficulty_options need a difficulty estimator name")
    return SCHEDULERS[name](**kwargs)


__all__ = [
    "Budget",
    "Lockstep",
    "Outcomes",
    "Plan",
    "Pool",
    "Selection",
    "SCHEDULERS",
    "BetaEstimator",
    "GraphEstimator",
    "bucket_rows",
    "load_state",
    "make_scheduler",
    "run_step",
    "save_state",
]
