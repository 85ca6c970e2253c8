"""The scheduler base class (ledger bookkeeping) and the baselines: uniform, DAPO dynamic
sampling, difficulty-prediction sampling.

`SchedulerBase` implements init/observe/finish for the ledger of rollouts
started this step; a method implements `_propose` (the next round's rows),
optionally `_after_observe` (apply the plan's decisions) and `_groups` (which
prompts' groups form the batch). `finish` updates the difficulty estimator
with every completed rollout of the step (so any method can carry one) and
resets the ledger.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from rlvr_jax.scheduling.base import (
    Budget,
    Plan,
    Pool,
    Selection,
    State,
    copy_state,
    np_rng,
)
from rlvr_jax.scheduling.betabin import sample_mixture
from rlvr_jax.scheduling.estimators import BetaEstimator, GraphEstimator

# Per-prompt status within a step (SARA uses all four).
UNTOUCHED, ACTIVE, COMMITTED, ABANDONED = 0, 1, 2, 3


def empty_plan(round_: int) -> Plan:
    z = np.zeros(0, np.int32)
    return Plan(round_, z, z.copy(), np.zeros(0, bool))


def new_rows(state: State, prompts, counts, budget: Budget, start: int = 0):
    """Fresh ledger slots for `counts[i]` new rollouts of `prompts[i]`, within capacity.

    Args:
      state: scheduler state (its ledger's count is the next free slot).
      prompts, counts: pool indices and rollouts each.
      budget: caps the total at budget.max_rollouts.
      start: slots already taken by earlier parts of the same plan.
    Returns:
      (prompt_R, rollout_R) int32 arrays (truncated to the capacity left).
    """
    prompt_R = np.repeat(np.asarray(prompts, np.int32), np.asarray(counts, np.int64))
    first = int(state["ledger"]["count"]) + start
    room = max(0, min(budget.max_rollouts, len(state["ledger"]["prompt"])) - first)
    prompt_R = prompt_R[:room]
    return prompt_R, (first + np.arange(len(prompt_R))).astype(np.int32)


def prompt_stats(state: State) -> dict[str, np.ndarray]:
    """Per pool prompt over this step's complete rollouts: n, successes k, started, effective
    (rewards not all equal) and mixed (0 < k < n: the verifier's verdicts differ)."""
    led = state["ledger"]
    n_pool = len(state["status"])
    used = np.arange(len(led["prompt"])) < led["count"]
    done = used & led["done"]
    p = np.where(used, led["prompt"], 0)
    rmin = np.full(n_pool, np.inf, np.float32)
    rmax = np.full(n_pool, -np.inf, np.float32)
    np.minimum.at(rmin, p[done], led["reward"][done])
    np.maximum.at(rmax, p[done], led["reward"][done])
    n = np.bincount(p[done], minlength=n_pool)
    k = np.bincount(p[done], weights=led["correct"][done], minlength=n_pool).astype(int)
    return {
        "n": n,
        "k": k,
        "started": np.bincount(p[used], minlength=n_pool),
        "effective": rmax > rmin,
        "mixed": (k > 0) & (k < n),
    }


def order_of_first_use(state: State) -> np.ndarray:
    """Pool indices of the prompts sampled this step, in order of their first rollout."""
    led = state["ledger"]
    p = led["prompt"][: int(led["count"])]
    _, first = np.unique(p, return_index=True)
    return p[np.sort(first)]


# Features per row that a run's select stage (scheduling.select) gives the ledger: the row's mean
# sampled-token log-prob and entropy (PAIR's prefix features).
RUN_FEATURES = 2


@dataclasses.dataclass(frozen=True)
class SchedulerBase:
    """Ledger bookkeeping shared by all schedulers (see rlvr_jax.scheduling.base)."""

    estimator: BetaEstimator | GraphEstimator | None = None
    num_features: int = 0  # PAIR stores prefix features in the ledger
    # Per-row fields (name -> [R] array) the selection adds to the training batch.
    batch_fields: ClassVar[tuple[str, ...]] = ()
    # True: fresh prompts may come from the caller's prompt stream (`propose(stream=)`)
    # instead of the pool; such a scheduler keeps no per-prompt statistics.
    stream_prompts: ClassVar[bool] = False
    # True: the scheduler reads prompt embeddings (`Pool.embeddings`) of the initial policy.
    needs_embeddings: ClassVar[bool] = False
    # True: never reads the verifier's rewards (a run may train with it on test prompts
    # under a label-free reward).
    label_free: ClassVar[bool] = False
    # Run-config defaults that differ from the dataclass's (e.g. 0 = derive at start).
    config_defaults: ClassVar[dict] = {}

    def embedding_refresh_every(self) -> int:
        """RL steps between re-embeddings of the pool with the current policy (0 = never)."""
        return 0

    def refresh_embeddings(self, state: State, embeddings_NxE) -> tuple[State, dict]:
        """The state after the pool is re-embedded, and {name: value} stats of the change.

        Called every `embedding_refresh_every()` steps; a scheduler that asks for it
        (`needs_embeddings`) implements it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not re-embed its pool")

    @classmethod
    def run_options(cls, options: dict, c, task=None, tokenizer=None) -> dict:
        """The constructor's keyword arguments for a run: `config.select.<name>` as it is.

        Args:
          options: the scheduler's sub-config as a dict.
          c: the run config; task, tokenizer: the run's (None in `validate`), for a
            scheduler that derives options from them.
        """
        del c, task, tokenizer
        return options

    @classmethod
    def check_config(cls, c) -> None:
        """Cross-field checks of its options against the run config `c` (rl.config.validate).

        Raises ValueError naming the config fields; the base class has none.
        """
        del c

    @classmethod
    def default_max_rollouts(cls, groups: int, group_size: int, max_rounds: int) -> int:
        """The rollout cap (ledger capacity) when the caller gives none: 2·B·G."""
        del max_rounds
        return 2 * groups * group_size

    # -------------------------------------------------------------- protocol
    def init(self, pool: Pool, budget: Budget) -> State:
        """Initial state over `pool`, with a ledger of budget.max_rollouts slots."""
        c = budget.max_rollouts
        ledger = {
            "prompt": np.full(c, -1, np.int32),
            "reward": np.zeros(c, np.float32),
            "correct": np.zeros(c, bool),
            "done": np.zeros(c, bool),
            "tokens": np.zeros(c, np.int32),
            "incl": np.ones(c, np.float32),
            "feat": np.zeros((c, self.num_features), np.float32),
            "count": np.zeros((), np.int32),
        }
        state = {
            "step": np.zeros((), np.int32),
            "round": np.zeros((), np.int32),
            "status": np.zeros(pool.num_prompts, np.int8),
            "ledger": ledger,
        }
        if self.estimator is not None:
            state["est"] = self.estimator.init(pool)
        state.update(self._init_extra(pool, budget))
        return state

    def propose(self, state: State, key, budget: Budget, stream=None) -> Plan:
        """The next round's rows (an empty plan ends the step).

        Args:
          state, key, budget: as in `run_step`.
          stream: optional `stream(count) -> pool indices` of the caller's next
            prompts, for schedulers with `stream_prompts` (default: prompts not
            sampled this step, uniformly at random from the pool).
        """
        if int(state["round"]) >= budget.max_rounds:
            return empty_plan(int(state["round"]))
        rng = np_rng(key)
        if stream is None:
            return self._propose(state, rng, budget)
        if not self.stream_prompts:
            raise ValueError(f"{type(self).__name__} selects from its pool; it takes no stream")
        return self._propose_from(state, rng, budget, stream)

    def observe(self, state: State, plan: Plan, outcomes) -> State:
        """Writes the round's outcomes into the ledger and applies the plan's decisions."""
        state = copy_state(state)
        led = state["ledger"]
        ids, fin = plan.rollout_R, np.asarray(outcomes.finished_R, bool)
        led["prompt"][ids] = plan.prompt_R
        led["tokens"][ids] += np.asarray(outcomes.tokens_R, np.int32)
        led["done"][ids] = fin
        led["reward"][ids] = np.where(fin, outcomes.reward_R, 0.0)
        led["correct"][ids] = np.asarray(outcomes.correct_R, bool) & fin
        if outcomes.features_RxF is not None and self.num_features:
            fresh = ~plan.cont_R
            led["feat"][ids[fresh]] = outcomes.features_RxF[fresh]
        if len(ids):
            led["count"] = np.asarray(max(int(led["count"]), int(ids.max()) + 1), np.int32)
        state["status"][plan.prompt_R] = np.maximum(state["status"][plan.prompt_R], ACTIVE)
        state["round"] = np.asarray(state["round"] + 1, np.int32)
        return self._after_observe(state, plan, outcomes)

    def finish(self, state: State, budget: Budget) -> tuple[State, Selection]:
        """Picks the batch, updates the estimator and resets the ledger for the next step."""
        state = copy_state(state)
        led = state["ledger"]
        count = int(led["count"])
        stats = prompt_stats(state)
        prompts = np.asarray(self._groups(state, budget, stats), np.int32)
        used = np.arange(len(led["prompt"])) < count
        rows, groups, cands = [], [], []
        for g, p in enumerate(prompts):
            ids = np.flatnonzero(used & (led["prompt"] == p) & led["done"])
            rows.append(ids)
            groups.append(np.full(len(ids), g, np.int32))
            cands.append(int(np.sum(used & (led["prompt"] == p))))
        rollout_R = np.concatenate(rows or [np.zeros(0, int)]).astype(np.int32)
        effective = int(np.sum(stats["effective"][prompts])) if len(prompts) else 0
        selection = Selection(
            prompt_P=prompts,
            rollout_R=rollout_R,
            group_R=np.concatenate(groups or [np.zeros(0, np.int32)]),
            incl_prob_R=led["incl"][rollout_R].copy(),
            candidates_P=np.asarray(cands, np.int32),
            reward_R=led["reward"][rollout_R].copy(),
            stats={
                "rollouts": float(count),
                "tokens": float(led["tokens"][:count].sum()),
                "effective_groups": float(effective),
                "selected_groups": float(len(prompts)),
                "sampled_prompts": float(np.sum(stats["started"] > 0)),
                "rounds": float(state["round"]),
            },
        )
        seen = np.flatnonzero(stats["n"] > 0)
        if self.estimator is not None:
            state["est"] = self.estimator.update(
                state["est"], seen, stats["k"][seen], stats["n"][seen]
            )
        state = self._finish_extra(state, budget, stats, prompts)
        for name, value in led.items():
            led[name] = np.zeros_like(value)
        led["prompt"][:] = -1
        led["incl"][:] = 1.0
        state["status"][:] = UNTOUCHED
        state["round"] = np.zeros((), np.int32)
        state["step"] = np.asarray(state["step"] + 1, np.int32)
        return state, selection

    # ------------------------------------------------------------- overrides
    def _init_extra(self, pool: Pool, budget: Budget) -> State:
        return {}

    def _propose(self, state: State, rng: np.random.Generator, budget: Budget) -> Plan:
        if not self.stream_prompts:
            raise NotImplementedError
        return self._propose_from(state, rng, budget, lambda n: self._fresh_prompts(state, rng, n))

    def _propose_from(self, state: State, rng, budget: Budget, fresh: Callable) -> Plan:
        """`_propose` of a `stream_prompts` scheduler: its fresh prompts are `fresh(count)`."""
        raise NotImplementedError

    def _after_observe(self, state: State, plan: Plan, outcomes) -> State:
        return state

    def _groups(self, state: State, budget: Budget, stats) -> np.ndarray:
        """Default: every prompt sampled this step."""
        return order_of_first_use(state)

    def _finish_extra(self, state: State, budget: Budget, stats, prompts) -> State:
        return state

    # --------------------------------------------------------------- helpers
    def _fresh_prompts(self, state: State, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` prompts not yet sampled this step, uniformly at random."""
        free = np.flatnonzero(state["status"] == UNTOUCHED)
        return rng.choice(free, size=min(count, len(free)), replace=False).astype(np.int32)

    def _full_groups(self, state, prompts, budget, round_) -> Plan:
        prompt_R, rollout_R = new_rows(state, prompts, [budget.group_size] * len(prompts), budget)
        return Plan(round_, prompt_R, rollout_R, np.zeros(len(prompt_R), bool))


@dataclasses.dataclass(frozen=True)
class Uniform(SchedulerBase):
    """B prompts uniformly at random (without replacement) or the stream's next B, G rollouts
    each, one round."""

    stream_prompts: ClassVar[bool] = True
    label_free: ClassVar[bool] = True  # the pipeline's next prompts, whatever their rewards

    def _propose_from(self, state, rng, budget, fresh):
        if int(state["round"]) > 0:
            return empty_plan(int(state["round"]))
        return self._full_groups(state, fresh(budget.groups), budget, 0)


@dataclasses.dataclass(frozen=True)
class DynamicSampling(SchedulerBase):
    """DAPO dynamic sampling: sample full groups, keep those with 0 < #correct < G, refill.

    Paper-fixed: keep the groups whose verifier verdicts are mixed (0 < #correct
    < G; all-correct and all-wrong groups have zero advantage) and resample
    until B are kept. Ours: each round samples ceil(oversample · missing) fresh
    prompts; the caps are budget.max_rounds and budget.max_rollouts (a short
    batch is returned short; the caller logs it).

    Attributes:
      oversample: prompts sampled per missing group in each round (ours: 1.0).
      keep: "verdict" (DAPO: 0 < #correct < G) or "reward" (rewards not all
        equal: shaped rewards, e.g. overlong penalties, can make an all-wrong
        group look informative).
    """

    oversample: float = 1.0
    keep: str = "verdict"
    stream_prompts: ClassVar[bool] = True

    def __post_init__(self):
        if self.keep not in ("verdict", "reward"):
            raise ValueError(f"DynamicSampling.keep = {self.keep!r}; valid: verdict, reward")
        if not self.oversample > 0:
            raise ValueError(f"DynamicSampling.oversample = {self.oversample!r}; must be > 0")

    def _kept(self, stats) -> np.ndarray:
        return stats["mixed"] if self.keep == "verdict" else stats["effective"]

    @classmethod
    def default_max_rollouts(cls, groups, group_size, max_rounds):
        """Room for every round to refill the whole batch: max_rounds·B·G."""
        return max_rounds * groups * group_size

    def _propose_from(self, state, rng, budget, fresh):
        r = int(state["round"])
        missing = budget.groups - int(np.sum(self._kept(prompt_stats(state))))
        if missing <= 0:
            return empty_plan(r)
        prompts = fresh(int(np.ceil(missing * self.oversample)))
        return self._full_groups(state, prompts, budget, r)

    def _groups(self, state, budget, stats):
        order = order_of_first_use(state)
        return order[self._kept(stats)[order]][: budget.groups]


@dataclasses.dataclass(frozen=True)
class DifficultyPrediction(SchedulerBase):
    """Difficulty-prediction sampling (DPS-style): pick prompts predicted near a target rate.

    Paper-fixed (as a baseline): a per-prompt Beta posterior with decay and
    selection of prompts whose predicted success is near a target. Ours: a
    Thompson draw p̃_i from each posterior, the B prompts with the smallest
    |p̃_i - target|, one round of full groups, no refill.

    Attributes:
      target: the success rate to aim at (ours: 0.5, maximal reward variance).
    """

    estimator: BetaEstimator | GraphEstimator | None = dataclasses.field(
        default_factory=BetaEstimator
    )
    target: float = 0.5

    def _propose(self, state, rng, budget):
        if int(state["round"]) > 0:
            return empty_plan(int(state["round"]))
        p = sample_mixture(rng, *self.estimator.mixture(state["est"]))
        chosen = np.argsort(np.abs(p - self.target), kind="stable")[: budget.groups]
        return self._full_groups(state, chosen.astype(np.int32), budget, 0)
