"""SARA: Sequential Adaptive Rollout Allocation (probe, then commit / abandon / probe more).

Paper-fixed: a Beta posterior over each prompt's success rate; the closed-form
probability that a full group will be effective under the Beta-Binomial
predictive (rlvr_jax.scheduling.betabin.prob_effective); a two-threshold,
SPRT-style rule after a short probe that commits effective-looking groups,
abandons saturated-looking ones, and gives the freed budget to fresh prompts;
no extra prediction rollouts.

Ours (fields): probe size n0 = 2; between the thresholds the prompt gets
`probe_step` = 2 more rollouts and is decided again next round (a prompt whose
probe reaches G is complete); thresholds τ_commit = 0.45, τ_abandon = 0.3
(picked on the simulator, frozen population seed 0, among 6 settings);
fresh prompts drawn uniformly (`fresh = "uniform"`) or by highest prior
P(effective) with Gumbel noise (`"predicted"`, SARA+DPS); `fresh_oversample`
fresh prompts per open batch slot; the posterior is any estimator
(per-prompt Beta with decay by default, or the graph estimator).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr_jax.scheduling.base import Plan
from rlvr_jax.scheduling.betabin import prob_effective_host
from rlvr_jax.scheduling.common import (
    ABANDONED,
    ACTIVE,
    COMMITTED,
    SchedulerBase,
    empty_plan,
    new_rows,
    order_of_first_use,
    prompt_stats,
)
from rlvr_jax.scheduling.estimators import BetaEstimator, GraphEstimator

COMMIT, ABANDON, PROBE = 1, 2, 3


def sara_decisions(p_eff, n_done, group_size, tau_commit, tau_abandon):
    """SARA's two-threshold rule for probed prompts.

    Args:
      p_eff: [M] P(the full group is effective | probe).
      n_done: [M] probe rollouts observed.
      group_size: G.
      tau_commit, tau_abandon: thresholds (tau_abandon < tau_commit).
    Returns:
      [M] int: COMMIT (1) if p_eff >= tau_commit or the group is already full,
      ABANDON (2) if p_eff <= tau_abandon, else PROBE (3).
    """
    p_eff = np.asarray(p_eff)
    out = np.full(p_eff.shape, PROBE, np.int8)
    out[p_eff <= tau_abandon] = ABANDON
    out[(p_eff >= tau_commit) | (np.asarray(n_done) >= group_size)] = COMMIT
    return out


@dataclasses.dataclass(frozen=True)
class SARA(SchedulerBase):
    """Sequential adaptive rollout allocation (see module docstring).

    Attributes:
      probe: n0, rollouts of a fresh prompt's first probe.
      probe_step: rollouts added to an undecided prompt per round.
      tau_commit, tau_abandon: the two thresholds on P(effective).
      fresh: "uniform" or "predicted" (SARA + difficulty prediction).
      fresh_oversample: fresh prompts per open batch slot per round.
    """

    estimator: BetaEstimator | GraphEstimator | None = dataclasses.field(
        default_factory=BetaEstimator
    )
    probe: int = 2
    probe_step: int = 2
    tau_commit: float = 0.45
    tau_abandon: float = 0.3
    fresh: str = "uniform"
    fresh_oversample: float = 1.0

    def __post_init__(self):
        if not 0 <= self.tau_abandon < self.tau_commit <= 1:
            raise ValueError(
                f"SARA: need 0 <= tau_abandon < tau_commit <= 1, got "
                f"{self.tau_abandon}, {self.tau_commit}"
            )
        if self.fresh not in ("uniform", "predicted"):
            raise ValueError(f"SARA.fresh = {self.fresh!r}; valid: uniform, predicted")

    def _p_eff(self, state, prompts, k, n, group_size):
        mix = self.estimator.mixture(state["est"])
        return prob_effective_host(*mix, prompts, k, n, group_size)

    def _propose(self, state, rng, budget):
        r, g = int(state["round"]), budget.group_size
        st = prompt_stats(state)
        status = state["status"]
        # Prompts still being probed whose rollouts have all come back.
        open_ = np.flatnonzero((status == ACTIVE) & (st["n"] == st["started"]))
        p_eff = self._p_eff(state, open_, st["k"][open_], st["n"][open_], g)
        act = sara_decisions(p_eff, st["n"][open_], g, self.tau_commit, self.tau_abandon)
        commit, abandon = open_[act == COMMIT], open_[act == ABANDON]
        probe = open_[act == PROBE]
        committed = np.flatnonzero(status == COMMITTED)
        done_effective = int(np.sum(st["effective"][committed] & (st["n"][committed] >= g)))
        pending = len(commit) + int(np.sum(st["n"][committed] < g)) + len(probe)
        missing = budget.groups - done_effective - pending
        if missing <= 0 and len(commit) + len(probe) == 0:
            return empty_plan(r)
        n_fresh = int(np.ceil(max(missing, 0) * self.fresh_oversample))
        fresh = self._pick_fresh(state, rng, n_fresh, g)
        counts = np.concatenate(
            [
                np.maximum(g - st["n"][commit], 0),
                np.minimum(self.probe_step, g - st["n"][probe]),
                np.full(len(fresh), min(self.probe, g)),
            ]
        )
        prompts = np.concatenate([commit, probe, fresh]).astype(np.int32)
        prompt_R, rollout_R = new_rows(state, prompts, counts, budget)
        info = {"commit": commit.astype(np.int32), "abandon": abandon.astype(np.int32)}
        return Plan(r, prompt_R, rollout_R, np.zeros(len(prompt_R), bool), info=info)

    def _pick_fresh(self, state, rng, count, group_size):
        if self.fresh == "uniform" or count == 0:
            return self._fresh_prompts(state, rng, count)
        free = np.flatnonzero(state["status"] == 0)
        zeros = np.zeros(len(free))
        mix = self.estimator.mixture(state["est"])
        prior = prob_effective_host(*mix, free, zeros, zeros, group_size)
        score = np.log(np.maximum(prior, 1e-9)) + rng.gumbel(size=len(free))
        return free[np.argsort(-score, kind="stable")[:count]].astype(np.int32)

    def _after_observe(self, state, plan, outcomes):
        for name, value in (("commit", COMMITTED), ("abandon", ABANDONED)):
            if name in plan.info:
                state["status"][plan.info[name]] = value
        return state

    def _groups(self, state, budget, stats):
        order = order_of_first_use(state)
        full = stats["n"][order] >= budget.group_size
        return order[full & stats["effective"][order]][: budget.groups]
