"""PAIR: Pairwise-Aware Inclusion Reweighting (prefix, predict, continue some, reweight pairs).

One step, two rounds:
  0. B prompts × G candidates, each sampled for `prefix_tokens` tokens only
     (`Plan.max_tokens`); the caller returns prefix features per row.
  1. A prefix predictor gives each unfinished candidate's P(correct) and
     remaining tokens; `pair_math.design_inclusion` picks continuation
     probabilities π under the expected suffix-token budget; candidates are
     continued independently with probability π (`Plan.cont_R`). The ledger
     logs π (1 for candidates that finished inside their prefix).
The selection holds every completed candidate with its π (`Selection.incl_prob_R`)
and the group's candidate count; the update stage turns them into advantages
with `pair_math.pair_advantages` (design-unbiased for the complete-pair
gradient; see that module).

Paper-fixed: prefixes as vertices, a prefix-only predictor of correctness and
remaining cost, a convex design of positive continuation probabilities under
an expected suffix-token budget, inverse joint-inclusion pair weights.
Ours (fields): the design objective (pair_math), prefix length 64, budget
T = `suffix_budget` × the predicted remaining tokens of the unfinished
candidates, π_min = 0.05, the predictor (online logistic regression for
correctness, ridge regression of log remaining tokens, both on the caller's
prefix features and trained on completed candidates weighted by 1/π).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

import numpy as np

from rlvr_jax.scheduling import pair_math
from rlvr_jax.scheduling.base import Plan
from rlvr_jax.scheduling.common import RUN_FEATURES, SchedulerBase, empty_plan, new_rows

log = logging.getLogger(__name__)


def remaining_token_prior(task, tokenizer, prefix_tokens: int, max_new_tokens: int, num: int = 64):
    """PAIR's remaining-token prior from the task: mean reference length minus the prefix.

    Args:
      task: the verifiable task (its train problems' `solution` strings).
      tokenizer: the policy's tokenizer.
      prefix_tokens: tokens every candidate already has after PAIR's round 0.
      max_new_tokens: L_max (a response never has more tokens).
      num: train problems averaged over.
    Returns:
      mean(len(solution tokens) + 1) − prefix_tokens, clipped to
      [1, L_max − prefix_tokens]; the upper end if the task has no solutions.
    """
    cap = max(max_new_tokens - prefix_tokens, 1)
    lengths = []
    for i in range(num):
        solution = task.problem(i, "train").solution
        if solution:
            lengths.append(len(tokenizer.encode(solution)) + 1)  # + end of turn
    if not lengths:
        return float(cap)
    return float(np.clip(np.mean(lengths) - prefix_tokens, 1, cap))


def _design_matrix(feat_RxF):
    return np.concatenate([np.ones((len(feat_RxF), 1), np.float32), feat_RxF], 1)


@dataclasses.dataclass(frozen=True)
class PAIR(SchedulerBase):
    """Prefix-then-continue allocation with pair-inclusion weights (see module docstring).

    Attributes:
      num_features: F, prefix features per row the sampler returns.
      prefix_tokens: tokens per candidate in round 0.
      suffix_budget: expected suffix tokens / predicted remaining tokens of the unfinished.
      pi_min: lower bound on the continuation probabilities.
      prior_remaining: remaining tokens predicted before any candidate completed
        (the ridge prior's intercept, worth `ridge` observations; ours: 256, the
        simulator's scale). A run derives it from the task instead
        (`remaining_token_prior`, `run_options`): after the first step the
        regression on observed lengths dominates it.
      ridge: ridge strength of the remaining-token regression.
      lr, iters: logistic-regression steps per RL step.
    """

    num_features: int = 2
    prefix_tokens: int = 64
    # The pair-inclusion weights' inputs, for the "pair" credit transform.
    batch_fields: ClassVar[tuple[str, ...]] = ("incl_prob_B", "candidates_B")
    # In a run, prior_remaining 0 = derived from the task at start.
    config_defaults: ClassVar[dict] = {"prior_remaining": 0.0}
    suffix_budget: float = 0.4
    pi_min: float = 0.05
    prior_remaining: float = 256.0
    ridge: float = 1.0
    lr: float = 0.5
    iters: int = 5

    @classmethod
    def run_options(cls, options: dict, c, task=None, tokenizer=None) -> dict:
        """The run's F prefix features; prior_remaining 0 = derived from the task.

        Without a task (`validate`) the derived prior is the cap L_max − prefix_tokens.
        """
        out = dict(options, num_features=RUN_FEATURES)
        if not out["prior_remaining"]:
            prefix, cap = out["prefix_tokens"], c.rollout.max_new_tokens
            if task is None:
                out["prior_remaining"] = float(max(cap - prefix, 1))
            else:
                out["prior_remaining"] = remaining_token_prior(task, tokenizer, prefix, cap)
                log.info(
                    "PAIR remaining-token prior (from the task): %.1f tokens",
                    out["prior_remaining"],
                )
        return out

    @classmethod
    def check_config(cls, c) -> None:
        """Round 0's prefix must leave room for a continuation within L_max."""
        if c.select.pair.prefix_tokens >= c.rollout.max_new_tokens:
            raise ValueError(
                f"config.select.pair.prefix_tokens = {c.select.pair.prefix_tokens} must be "
                f"below config.rollout.max_new_tokens = {c.rollout.max_new_tokens}"
            )

    def __post_init__(self):
        rules = {
            "prefix_tokens": (self.prefix_tokens >= 1, ">= 1"),
            "suffix_budget": (self.suffix_budget > 0, "> 0"),
            "pi_min": (0 < self.pi_min <= 1, "in (0, 1]"),
            "prior_remaining": (self.prior_remaining > 0, "> 0"),
            "ridge": (self.ridge > 0, "> 0"),
        }
        for name, (ok, rule) in rules.items():
            if not ok:
                raise ValueError(f"PAIR.{name} = {getattr(self, name)!r}; must be {rule}")

    def _init_extra(self, pool, budget):
        d = self.num_features + 1
        xty = np.zeros(d, np.float32)
        xty[0] = self.ridge * np.log1p(self.prior_remaining)
        return {
            "pred": {
                "w_correct": np.zeros(d, np.float32),
                "xtx": (self.ridge * np.eye(d)).astype(np.float32),
                "xty": xty,
            }
        }

    def predict(self, state, feat_RxF):
        """(P(correct), remaining tokens) of prefixes with features `feat_RxF`."""
        x = _design_matrix(np.asarray(feat_RxF, np.float32))
        pred = state["pred"]
        p = 1.0 / (1.0 + np.exp(-(x @ pred["w_correct"])))
        beta = np.linalg.solve(pred["xtx"].astype(np.float64), pred["xty"].astype(np.float64))
        return p, np.expm1(np.clip(x @ beta, 0.0, 20.0))

    def _propose(self, state, rng, budget):
        r = int(state["round"])
        if r == 0:
            prompts = self._fresh_prompts(state, rng, budget.groups)
            counts = [budget.group_size] * len(prompts)
            prompt_R, rollout_R = new_rows(state, prompts, counts, budget)
            cont = np.zeros(len(prompt_R), bool)
            return Plan(0, prompt_R, rollout_R, cont, max_tokens=self.prefix_tokens)
        if r > 1:
            return empty_plan(r)
        led = state["ledger"]
        n = int(led["count"])
        done = led["done"][:n]
        p_hat, remaining = self.predict(state, led["feat"][:n])
        p = np.where(done, led["correct"][:n], p_hat).astype(np.float32)
        u = pair_math.contrast_mass(p, led["prompt"][:n])
        budget_tokens = self.suffix_budget * float(np.sum(remaining[~done]))
        pi = np.asarray(pair_math.design_inclusion(u, remaining, ~done, budget_tokens, self.pi_min))
        go = ~done & (rng.random(n) < pi)
        slots = np.flatnonzero(go).astype(np.int32)
        info = {"incl": np.where(done, 1.0, pi).astype(np.float32)}
        return Plan(1, led["prompt"][slots], slots, np.ones(len(slots), bool), info=info)

    def _after_observe(self, state, plan, outcomes):
        if "incl" in plan.info:
            state["ledger"]["incl"][: len(plan.info["incl"])] = plan.info["incl"]
        return state

    def _finish_extra(self, state, budget, stats, prompts):
        led = state["ledger"]
        n = int(led["count"])
        done = np.flatnonzero(led["done"][:n])
        if len(done) == 0:
            return state
        x = _design_matrix(led["feat"][done])
        w_ipw = 1.0 / led["incl"][done]
        y = led["correct"][done].astype(np.float32)
        remaining = np.maximum(led["tokens"][done] - self.prefix_tokens, 0)
        pred = state["pred"]
        w = pred["w_correct"].astype(np.float64)
        for _ in range(self.iters):
            p = 1.0 / (1.0 + np.exp(-(x @ w)))
            w -= self.lr * (x.T @ (w_ipw * (p - y))) / np.sum(w_ipw)
        pred["w_correct"] = w.astype(np.float32)
        pred["xtx"] = (pred["xtx"] + (x.T * w_ipw) @ x).astype(np.float32)
        pred["xty"] = (pred["xty"] + (x.T * w_ipw) @ np.log1p(remaining)).astype(np.float32)
        return state
