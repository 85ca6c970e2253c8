"""VIGOR: variance-guided online rollout allocation.

Paper-fixed: every prompt of the step's batch starts with a few rollouts; then,
round after round, prompts with the highest group reward variance get more
rollouts until a fixed total rollout budget is spent.

Ours (fields): the batch has ceil(prompt_factor · B) prompts; n0 = 2 initial
rollouts each; each refinement round gives `step` more rollouts to the top
`refine_frac` of the prompts (by Bessel sample variance of their rewards; ties,
e.g. among all-equal groups, broken by the Jeffreys-posterior variance
E[p(1-p)] so that fewer observations rank higher) with fewer than
`max_per_prompt` rollouts; the total budget is `budget_factor` · B · G
rollouts (1 = the uniform scheduler's cost). The batch is every group with at
least two rollouts and unequal rewards, so groups have different sizes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr_jax.scheduling.base import Plan
from rlvr_jax.scheduling.common import (
    SchedulerBase,
    empty_plan,
    new_rows,
    order_of_first_use,
    prompt_stats,
)


def reward_variance(state) -> tuple[np.ndarray, np.ndarray]:
    """Per pool prompt: (Bessel sample variance of complete rewards, complete count)."""
    led = state["ledger"]
    n_pool = len(state["status"])
    done = (np.arange(len(led["prompt"])) < led["count"]) & led["done"]
    p, r = led["prompt"][done], led["reward"][done].astype(np.float64)
    n = np.bincount(p, minlength=n_pool)
    s1 = np.bincount(p, weights=r, minlength=n_pool)
    s2 = np.bincount(p, weights=r * r, minlength=n_pool)
    var = (s2 - s1**2 / np.maximum(n, 1)) / np.maximum(n - 1, 1)
    return np.where(n > 1, np.maximum(var, 0.0), 0.0), n


def vigor_targets(var_M, n_M, k_M, eligible_M, count, rng=None):
    """Indices of the `count` eligible prompts VIGOR refines (highest variance first).

    Args:
      var_M: reward sample variance; n_M, k_M: rollouts and successes.
      eligible_M: bool, may receive more rollouts.
      count: how many to pick.
      rng: optional generator for a last random tie-break.
    Returns:
      int indices into the M prompts.
    """
    a, b = 0.5 + k_M, 0.5 + n_M - k_M
    post = a * b / ((a + b) ** 2 * (a + b + 1)) + a * b / (a + b) ** 2
    noise = 0.0 if rng is None else rng.random(len(var_M)) * 1e-9
    score = np.where(eligible_M, var_M + 1e-3 * post + noise, -np.inf)
    order = np.argsort(-score, kind="stable")
    return order[: min(count, int(np.sum(eligible_M)))]


@dataclasses.dataclass(frozen=True)
class VIGOR(SchedulerBase):
    """Variance-guided allocation (see module docstring).

    Attributes:
      prompt_factor: prompts per step / B.
      initial: n0, rollouts per prompt in round 0.
      step: rollouts added per refined prompt per round.
      refine_frac: fraction of eligible prompts refined per round.
      max_per_prompt: cap on one prompt's rollouts (0 = 2G).
      budget_factor: total rollouts per step / (B · G).
    """

    prompt_factor: float = 2.0
    initial: int = 2
    step: int = 2
    refine_frac: float = 0.5
    max_per_prompt: int = 0
    budget_factor: float = 1.0

    def _total(self, budget):
        return min(budget.max_rollouts, int(self.budget_factor * budget.groups * budget.group_size))

    def _propose(self, state, rng, budget):
        r = int(state["round"])
        left = self._total(budget) - int(state["ledger"]["count"])
        if r == 0:
            n_prompts = min(int(np.ceil(self.prompt_factor * budget.groups)), left // self.initial)
            prompts = self._fresh_prompts(state, rng, n_prompts)
            prompt_R, rollout_R = new_rows(state, prompts, [self.initial] * len(prompts), budget)
            return Plan(r, prompt_R, rollout_R, np.zeros(len(prompt_R), bool))
        if left < self.step:
            return empty_plan(r)
        cap = self.max_per_prompt or 2 * budget.group_size
        batch = order_of_first_use(state)
        var, n = reward_variance(state)
        st = prompt_stats(state)
        eligible = (st["started"][batch] + self.step <= cap) & (n[batch] == st["started"][batch])
        count = min(int(np.ceil(self.refine_frac * np.sum(eligible))), left // self.step)
        pick = batch[vigor_targets(var[batch], n[batch], st["k"][batch], eligible, count, rng)]
        prompt_R, rollout_R = new_rows(state, pick, [self.step] * len(pick), budget)
        return Plan(r, prompt_R, rollout_R, np.zeros(len(prompt_R), bool))

    def _groups(self, state, budget, stats):
        order = order_of_first_use(state)
        return order[stats["effective"][order] & (stats["n"][order] >= 2)]
