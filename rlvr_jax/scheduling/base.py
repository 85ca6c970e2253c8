"""The select↔rollout protocol shared by every scheduler, and the host loop that drives it.

A scheduler is a pure state machine over a prompt pool. Its state is a dict
pytree of NumPy arrays (checkpointable next to the train state); the scheduler
object itself only holds hyperparameters. One RL step is

    plan = scheduler.propose(state, key, budget)      # rows to sample this round
    outcomes = sample(plan)                           # the sampler (or simulator)
    state = scheduler.observe(state, plan, outcomes)  # ... repeat until plan is empty
    state, selection = scheduler.finish(state, budget)

`run_step` is that loop. Within a step the state holds a *ledger* of fixed
capacity (`budget.max_rollouts` slots): every rollout started this step gets a
slot id (`Plan.rollout_R`), which stays its id when a later round continues it
past a prefix (PAIR). The selection names the rollouts to train on by these ids,
so the caller keeps its sampled rows in a dict keyed by rollout id.

Round sizes are padded by `run_step` to a few buckets (multiples of 8 times a
power of two): a real sampler compiles one program per row count, so rounds of
arbitrary size would recompile. Padding rows have `valid_R = False`; the
callback samples them like any row and the loop drops their outcomes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

State = dict[str, Any]  # pytree of np.ndarray (nested dicts allowed)


@dataclasses.dataclass(frozen=True)
class Pool:
    """The prompt pool a scheduler selects from.

    Attributes:
      num_prompts: N; prompts are addressed by index in [0, N).
      embeddings: optional [N, E] float representations (LEEPS neighbours, kNN graph).
      ids: optional N prompt ids (bookkeeping only).
    """

    num_prompts: int
    embeddings: np.ndarray | None = None
    ids: Sequence[str] | None = None


@dataclasses.dataclass(frozen=True)
class Budget:
    """One RL step's targets and caps.

    Attributes:
      groups: B, effective groups wanted in the training batch.
      group_size: G, rollouts per full group.
      max_rollouts: cap on rollouts started per step (also the ledger capacity,
        fixed at `init`: later budgets may not exceed it).
      max_rounds: cap on sampling rounds per step.
    """

    groups: int
    group_size: int
    max_rollouts: int
    max_rounds: int = 8

    def __post_init__(self):
        if min(self.groups, self.group_size, self.max_rollouts, self.max_rounds) < 1:
            raise ValueError(f"Budget fields must be >= 1, got {self}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Rows to sample in one round (rows of a prompt are contiguous).

    Attributes:
      round: round index within the step.
      prompt_R: int32 pool index of each row.
      rollout_R: int32 ledger slot of each row: a fresh slot for a new rollout,
        the continued rollout's slot when `cont_R`.
      cont_R: bool, the row continues rollout `rollout_R` from its prefix (the
        caller passes the earlier tokens as `prefixes=` to the sampler).
      max_tokens: 0 = the sampler's full generation budget; > 0 = stop each row
        after this many new tokens (PAIR prefixes).
      valid_R: bool, False for padding rows added by `padded`.
      info: method-specific decisions that `observe` applies (arrays).
    """

    round: int
    prompt_R: np.ndarray
    rollout_R: np.ndarray
    cont_R: np.ndarray
    max_tokens: int = 0
    valid_R: np.ndarray | None = None
    info: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.valid_R is None:
            object.__setattr__(self, "valid_R", np.ones(len(self.prompt_R), bool))

    @property
    def num_rows(self) -> int:
        return len(self.prompt_R)

    def padded(self, rows: int) -> Plan:
        """The plan with padding rows (copies of row 0, valid_R False) up to `rows`."""
        extra = rows - self.num_rows
        if extra < 0:
            raise ValueError(f"plan has {self.num_rows} rows; cannot pad to {rows}")
        if extra == 0 or self.num_rows == 0:
            return self

        def pad(a):
            return np.concatenate([a, np.repeat(a[:1], extra, 0)])

        return dataclasses.replace(
            self,
            prompt_R=pad(self.prompt_R),
            rollout_R=pad(self.rollout_R),
            cont_R=pad(self.cont_R),
            valid_R=np.concatenate([self.valid_R, np.zeros(extra, bool)]),
        )


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """What sampling a plan produced, one entry per plan row.

    Attributes:
      reward_R: float32 reward (meaningful where finished_R).
      correct_R: bool verifier verdict (Beta posteriors count these).
      tokens_R: int32 tokens generated in this round.
      finished_R: bool, the rollout is complete (stopped or hit the full budget);
        False for a prefix that must be continued to learn its reward.
      features_RxF: optional float32 prefix features (PAIR's predictor input).
    """

    reward_R: np.ndarray
    correct_R: np.ndarray
    tokens_R: np.ndarray
    finished_R: np.ndarray
    features_RxF: np.ndarray | None = None

    def take(self, n: int) -> Outcomes:
        f = None if self.features_RxF is None else self.features_RxF[:n]
        return Outcomes(
            self.reward_R[:n], self.correct_R[:n], self.tokens_R[:n], self.finished_R[:n], f
        )


@dataclasses.dataclass(frozen=True)
class Selection:
    """The groups an RL step trains on.

    Attributes:
      prompt_P: int32 pool index of each selected group.
      rollout_R: int32 ledger ids of the complete rollouts to train on, grouped.
      group_R: int32 group of each rollout in [0, P).
      incl_prob_R: float32 inclusion probability of each rollout (1 unless PAIR).
      candidates_P: int32 candidate rollouts per group (the complete-pair
        target's group size; = the group's rollouts unless PAIR).
      reward_R: float32 rewards of the selected rollouts.
      stats: scalars of the step (rollouts, tokens, effective groups, rounds).
    """

    prompt_P: np.ndarray
    rollout_R: np.ndarray
    group_R: np.ndarray
    incl_prob_R: np.ndarray
    candidates_P: np.ndarray
    reward_R: np.ndarray
    stats: dict[str, float]

    @property
    def num_groups(self) -> int:
        return len(self.prompt_P)


def bucket_rows(rows: int, multiple: int = 8) -> int:
    """Smallest `multiple * 2**k` >= rows: few distinct round sizes, so few compiles."""
    if rows <= 0:
        return 0
    units = -(-rows // multiple)
    return multiple * (1 << (units - 1).bit_length())


def run_step(
    scheduler,
    state: State,
    key: jax.Array,
    budget: Budget,
    sample: Callable[[Plan], Outcomes],
    *,
    bucket: Callable[[int], int] = bucket_rows,
    stream: Callable[[int], np.ndarray] | None = None,
    lockstep: Lockstep | None = None,
) -> tuple[State, Selection]:
    """Runs one RL step's select↔rollout rounds.

    Args:
      scheduler: a scheduler (see rlvr_jax.scheduling.SCHEDULERS).
      state: its state.
      key: PRNG key of this step.
      budget: the step's Budget.
      sample: `sample(plan) -> Outcomes` with one entry per (padded) plan row.
      bucket: row count -> padded row count per round.
      stream: optional `stream(count) -> pool indices`: the caller's prompt stream,
        where a `stream_prompts` scheduler draws its fresh prompts.
      lockstep: in a multi-process run, keeps every process's rounds in step (see
        `Lockstep`): a process whose scheduler is done idles while others sample.
    Returns:
      (state after the step, Selection).
    """
    done, last = False, None
    for r in range(budget.max_rounds):
        if not done:
            kw = {} if stream is None else {"stream": stream}
            plan = scheduler.propose(state, jax.random.fold_in(key, r), budget, **kw)
            if plan.num_rows == 0:
                if plan.info:  # decisions without rows (e.g. all abandoned) still apply
                    state = scheduler.observe(state, plan, empty_outcomes())
                done = True
        if lockstep is None and done:
            break
        if lockstep is not None and not lockstep.agree(not done):  # every process is done
            break
        if done:  # another process samples this round: join its collectives
            if last is None:
                raise RuntimeError("a process had no rows to sample in the step's first round")
            lockstep.idle(last, r)
            continue
        last = plan.padded(bucket(plan.num_rows))
        outcomes = sample(last)
        state = scheduler.observe(state, plan, outcomes.take(plan.num_rows))
    return scheduler.finish(state, budget)


@dataclasses.dataclass(frozen=True)
class Lockstep:
    """How the processes of a multi-process run agree on the rounds of a step.

    Sampling is a collective (every process runs the same jitted programs), so all
    processes run the same number of rounds: while any still samples, a process
    whose scheduler is done repeats its last round's rollout and discards it.

    Attributes:
      agree: `agree(flag) -> bool`, the OR of `flag` over processes (a collective).
      idle: `idle(plan, round)`: runs the rollout of `plan` (this process's last
        padded plan) with round `round`'s key, which the processes share, without
        recording its rows.
    """

    agree: Callable[[bool], bool]
    idle: Callable[[Plan, int], None]


def empty_outcomes() -> Outcomes:
    """Outcomes of a plan with no rows."""
    return Outcomes(
        np.zeros(0, np.float32), np.zeros(0, bool), np.zeros(0, np.int32), np.zeros(0, bool)
    )


def np_rng(key: jax.Array) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key (typed or raw uint32)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())


def copy_state(state: State) -> State:
    """A deep copy (schedulers never mutate the state they were given)."""
    return jax.tree.map(np.array, state)


def save_state(path: str, state: State) -> None:
    """Writes a state as an .npz of its flattened leaves (order of jax.tree.flatten)."""
    leaves = jax.tree.leaves(state)
    np.savez(path, *leaves)


def load_state(path: str, like: State) -> State:
    """Reads a state written by `save_state` into the structure of `like`."""
    with np.load(path) as f:
        leaves = [f[f"arr_{i}"] for i in range(len(f.files))]
    return jax.tree.unflatten(jax.tree.structure(like), leaves)
