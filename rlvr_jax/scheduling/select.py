"""The select stage: a scheduler picks prompts and rollout counts, round by round.

Every `config.select.name` is a scheduler of `rlvr_jax.scheduling` (uniform
and DAPO dynamic sampling included; hyperparameters `config.select.<name>.*`)
behind one loop, `scheduling.run_step`: each round the scheduler proposes rows,
the rollout stage generates and scores them (`Select.step`'s `rollout(request,
key)`), the scheduler observes the outcomes. The final `Selection` is packed
into a fixed-shape `Groups` batch of B·G rows (padding rows masked out), plus
the per-row fields the scheduler declares (`batch_fields`: PAIR's inclusion
probabilities, read by the "pair" credit transform of `rl.methods.pair`). `select.max_rounds`
caps the rounds of every scheduler.

Fresh prompts: schedulers without per-prompt statistics (`stream_prompts`:
uniform, dynamic sampling) take them from the data pipeline (`PromptStream`:
each process reads its own shard; the position is checkpointed): `stream(k)`
is the first k prompts of the next batch of B (the rest of it is skipped). The
others choose among the pool of `task.train_size` problems they keep
statistics of. Keys: round r samples with `fold_in(key, r)`; the scheduler
draws from `fold_in(key, SCHEDULER_KEY)`. In a multi-process run a pool
scheduler runs on every process over the global budget and observes every
host's outcomes (`scheduling.select_hosts`).

PAIR: round 0 samples `prefix_tokens` tokens per candidate; round 1 continues
the chosen ones from their prefixes (`Request.prefixes`) for at most
L_max − prefix_tokens tokens; the trained row is prefix + continuation with the
prefix round's log-probs (same weights: exact). Prefix features (ours): the
prefix's mean sampled-token log-prob and entropy (F = 2). Its remaining-token
prior (`select.pair.prior_remaining`, 0 = derived): the mean token length of
the task's reference solutions (+ end of turn) minus the prefix, clipped to
[1, L_max − prefix_tokens]; the ridge regression on observed lengths takes over
after the first step.

Embeddings (LEEPS neighbours, the graph estimator's kNN graph): the initial
policy's mean final hidden state over each prompt's tokens, computed once at
start (before any restore, so a resumed run computes the same ones). The graph
estimator's settings are `config.select.graph`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax import distributed
from rlvr_jax.rollout import Groups, Prefix, Request, stack_rows
from rlvr_jax.scheduling import (
    SCHEDULERS,
    Budget,
    Lockstep,
    Outcomes,
    Pool,
    bucket_rows,
    make_scheduler,
    run_step,
    select_hosts,
)
from rlvr_jax.scheduling.common import RUN_FEATURES
from rlvr_jax.scheduling.estimators import ESTIMATORS, make_estimator
from rlvr_jax.tokenizers import encode_prompt

log = logging.getLogger(__name__)

# fold_in index of the scheduler's key: above any sampling round's.
SCHEDULER_KEY = 2**31 - 1
# Select statistics that are counts (summed over processes); the rest are means.
COUNT_STATS = (
    "kept_groups",
    "select/short_groups",
    "select/cap_hit",
    "dropped_groups",
    "select/rollouts",
    "select/tokens",
    "select/effective_groups",
    "select/selected_groups",
    "select/sampled_prompts",
    "select/off_batch_rollouts",
    "select/off_batch_tokens",
)


class PromptStream:
    """The data pipeline as a scheduler's source of fresh prompts (pool indices).

    Attributes:
      problems: index -> the Problem the pipeline gave for it (this step's).
    """

    def __init__(self, batches: Iterator):
        self.batches = batches
        self.problems = {}

    def __call__(self, count: int) -> np.ndarray:
        """The next `count` prompts: the first of the next batch(es), the rest skipped."""
        out: list[int] = []
        while len(out) < count:
            batch = next(self.batches)
            for index, problem in zip(batch.index_B, batch.problems(), strict=True):
                if len(out) < count:
                    out.append(int(index))
                    self.problems[int(index)] = problem
        return np.asarray(out, np.int32)


class Select:
    """The run's scheduler, its state (checkpointed by the trainer) and prompt source.

    Attributes:
      scheduler: the scheduler object; state: its state; budget: the per-step Budget.
      fields: the per-row batch fields the scheduler adds.
    """

    def __init__(
        self, c, model, tokenizer, task, prompts: Iterator, pad_id: int, processes=1, mesh=None
    ):
        self.c, self.tokenizer, self.task = c, tokenizer, task
        self.scheduler = build_scheduler(c, task, tokenizer)
        self.fields = type(self.scheduler).batch_fields
        self.processes, self.mesh = processes, mesh
        # A pool scheduler runs over the global budget on every process (`select_hosts`).
        self.shared = processes > 1 and not self.scheduler.stream_prompts
        self.budget = budget_of(c, 1 if self.shared else processes)
        self.stream = PromptStream(prompts) if self.scheduler.stream_prompts else None
        self._problems = {}
        self.model, self.pad_id = model, pad_id  # the policy, updated in place by the trainer
        n = c.task.train_size
        embeddings = self._embeddings() if needs_embeddings(c) else None
        self.state = self.scheduler.init(Pool(n, embeddings=embeddings), self.budget)

    def _embeddings(self) -> np.ndarray:
        """[N, D] the pool's prompts embedded by the current policy."""
        n, tok = self.c.task.train_size, self.tokenizer
        prompts = [encode_prompt(tok, self._problem(i).prompt) for i in range(n)]
        return prompt_embeddings(self.model, prompts, self.pad_id, mesh=self.mesh)

    def _refresh_neighbours(self) -> dict[str, float]:
        """The pool re-embedded with the current policy every `embedding_refresh_every()` steps.

        Returns the step's stats, "select/<name>" of the scheduler's refresh stats
        (LEEPS: "select/leeps_neighbour_overlap", the share of neighbour pairs the
        refresh kept), on refresh steps only.
        """
        every = self.scheduler.embedding_refresh_every()
        step = int(self.state["step"])
        if not every or step == 0 or step % every:
            return {}
        self.state, stats = self.scheduler.refresh_embeddings(self.state, self._embeddings())
        log.info("step %d: the pool re-embedded (%s)", step, stats)
        return {f"select/{k}": v for k, v in stats.items()}

    def _problem(self, index: int):
        index = int(index)
        if self.stream is not None and index in self.stream.problems:
            return self.stream.problems[index]
        if index not in self._problems:
            self._problems[index] = self.task.problem(index, "train")
        return self._problems[index]

    def step(
        self, key: jax.Array, rollout: Callable[[Request, jax.Array], Groups]
    ) -> tuple[Groups, dict[str, float], dict[str, np.ndarray]]:
        """One RL step's select ↔ rollout rounds.

        Args:
          key: the step's PRNG key.
          rollout: `rollout(request, key) -> Groups`, one row per requested row.
        Returns:
          (groups, stats, fields): B·G rows (padding rows invalid), the step's
          statistics and the scheduler's per-row batch fields.
        """
        refreshed = self._refresh_neighbours()
        rows: dict[int, dict] = {}  # rollout id -> its row (Groups.row) and sampled tokens
        index, n = jax.process_index(), self.processes

        off_batch = np.zeros(2, np.float64)  # this process's rollouts, tokens off the rows

        def sample(plan) -> Outcomes:
            part = select_hosts.host_part(plan, index, n) if self.shared else plan
            request = self._request(part, rows, budget_of=plan)
            groups = rollout(request, jax.random.fold_in(key, plan.round))
            off_batch[:] += groups.off_batch
            local = self._outcomes(part, groups, rows)
            return select_hosts.share_round(part, local, rows) if self.shared else local

        def idle(plan, round_: int) -> None:  # another process samples: join its collectives
            rollout(self._request(plan, rows), jax.random.fold_in(key, round_))

        lockstep = Lockstep(distributed.agree, idle) if n > 1 and not self.shared else None
        bucket = select_hosts.host_bucket(n) if self.shared else bucket_rows
        sched_key = jax.random.fold_in(key, SCHEDULER_KEY)
        self.state, sel = run_step(
            self.scheduler, self.state, sched_key, self.budget, sample, stream=self.stream,
            lockstep=lockstep, bucket=bucket,
        )  # fmt: skip
        b = self.budget.groups
        if self.shared:  # this host's share of the (identical) global selection
            share = [select_hosts.host_selection(sel, i, n) for i in range(n)]
            rows = select_hosts.exchange_rows(rows, [s.rollout_R for s in share], index)
            sel, b = share[index], b // n
        groups, stats, fields = self._pack(sel, rows, b)
        if self.shared:  # every host reports the global counts: 1/n each, summed later
            for k in sel.stats:
                if f"select/{k}" in COUNT_STATS:
                    stats[f"select/{k}"] /= n
        # Generated off the rows (LSPO's re-rolls): counted where this process generated them.
        stats["select/off_batch_rollouts"], stats["select/off_batch_tokens"] = map(float, off_batch)
        stats["select/rollouts"] += off_batch[0]
        stats["select/tokens"] += off_batch[1]
        stats.update(refreshed)
        if self.stream is not None:
            self.stream.problems.clear()
        return groups, stats, fields

    def _request(self, plan, rows, budget_of=None) -> Request:
        """The plan's rows as runs of one problem, with the prefixes of continued rows.

        The token budget comes from `budget_of` (default `plan`): the whole round's
        plan when `plan` is one host's slice, so every host asks for the same budget.
        """
        prompts = plan.prompt_R
        starts = np.flatnonzero(np.r_[True, prompts[1:] != prompts[:-1]])
        counts = np.diff(np.r_[starts, len(prompts)])
        l_max = self.c.rollout.max_new_tokens
        whole = plan if budget_of is None else budget_of
        budget, prefixes = whole.max_tokens or l_max, None
        if whole.cont_R.any():
            ids = whole.rollout_R[whole.cont_R]
            budget = l_max - max(len(rows[int(i)]["sampled"]) for i in ids)
        if plan.cont_R.any():
            prefixes = [
                _prefix(rows[int(i)]) if c else None
                for i, c in zip(plan.rollout_R, plan.cont_R, strict=True)
            ]
        problems = [self._problem(p) for p in prompts[starts]]
        return Request(problems, counts, prefixes, max(budget, 1))

    def _outcomes(self, plan, groups: Groups, rows) -> Outcomes:
        """Stores every valid row under its rollout id; the verdicts of finished ones."""
        n = plan.num_rows
        finished = np.ones(n, bool) if not plan.max_tokens else groups.stopped.copy()
        prefix = np.zeros(n, np.int32)
        if plan.cont_R.any():
            cont = zip(plan.rollout_R, plan.cont_R, strict=True)
            prefix = np.array([len(rows[int(i)]["sampled"]) if c else 0 for i, c in cont])
        feats = np.zeros((n, RUN_FEATURES), np.float32)
        for b in range(n):
            m = groups.response_mask[b]
            if m.any():
                feats[b] = groups.behaviour_logps[b][m].mean(), groups.entropy[b][m].mean()
            if not plan.valid_R[b]:
                continue
            row = groups.row(b)
            row["sampled"] = row["tokens"][row["response_mask"]].tolist()
            if not finished[b]:  # a prefix to continue: no verdict yet
                for k in ("reward", "correct", "reason"):
                    del row[k]
            rows[int(plan.rollout_R[b])] = row
        reward = np.where(finished, groups.rewards, 0.0).astype(np.float32)
        correct = finished & groups.correct
        new_tokens = (groups.lengths - prefix).astype(np.int32)
        return Outcomes(reward, correct, new_tokens, finished, feats)

    def _pack(self, sel, rows, b) -> tuple[Groups, dict[str, float], dict[str, np.ndarray]]:
        """The Selection as b·G fixed rows; groups past that many rows are dropped (logged)."""
        g = self.budget.group_size
        cap = b * g
        keep_groups, used = 0, 0
        for p in range(sel.num_groups):
            size = int(np.sum(sel.group_R == p))
            if used + size > cap:
                break
            keep_groups, used = keep_groups + 1, used + size
        ids = sel.rollout_R[:used]
        # Padding rows copy a sampled row and sit in their own group (masked out anyway).
        filler = int(ids[0]) if used else next(i for i, r in rows.items() if "reward" in r)
        all_ids = np.concatenate([ids, np.full(cap - used, filler)]).astype(int)
        group = np.concatenate([sel.group_R[:used], np.full(cap - used, keep_groups)])
        problems = [self._problem(p) for p in sel.prompt_P[:keep_groups]]
        if used < cap:  # the padding rows' group
            problems.append(problems[0] if problems else self._problem(0))
        valid = np.arange(cap) < used
        groups = stack_rows([rows[int(i)] for i in all_ids], group, valid, problems)
        groups = groups.split_subgroups()  # a plug-in's own grouping (SpyRL's roles)
        incl = np.concatenate([sel.incl_prob_R[:used], np.ones(cap - used)]).astype(np.float32)
        cands = np.concatenate([sel.candidates_P[group[:used]], np.full(cap - used, g)])
        fields = {"incl_prob_B": incl, "candidates_B": cands.astype(np.int32)}
        done = [r for r in rows.values() if "reward" in r]
        stats = {f"select/{k}": float(v) for k, v in sel.stats.items()}
        # A batch short of B groups after a cap (select.max_rounds / max_rollouts) was hit.
        short = b - keep_groups
        capped = sel.stats["rounds"] >= self.budget.max_rounds
        capped |= sel.stats["rollouts"] >= self.budget.max_rollouts
        if short > 0 and capped:
            log.warning(
                "select %r hit its cap (select.max_rounds = %d, select.max_rollouts = %d): "
                "%d of %d groups missing",
                self.c.select.name, self.budget.max_rounds, self.budget.max_rollouts, short, b,
            )  # fmt: skip
        stats.update(
            {"select/short_groups": float(short), "select/cap_hit": float(short > 0 and capped)},
            kept_groups=float(keep_groups),
            dropped_groups=float(sel.num_groups - keep_groups),
            reward=float(np.mean([r["reward"] for r in done])) if done else 0.0,
            pass_rate=float(np.mean([r["correct"] for r in done])) if done else 0.0,
        )
        return groups, stats, {k: fields[k] for k in self.fields}


def _prefix(row: dict) -> Prefix:
    """A stored row as the prefix its continuation starts from."""
    m = row["response_mask"]
    return Prefix(row["sampled"], row["behaviour_logps"][m], row["entropy"][m])


# Scheduler dataclass fields that are not config fields: the estimator is chosen
# by `select.estimator` (its settings: `select.graph`); the prefix features are fixed
# (`scheduling.common.RUN_FEATURES`).
_NOT_FIELDS = ("estimator", "num_features")
ESTIMATOR_NAMES = ("", "beta", "graph")


def scheduler_defaults(name: str) -> dict:
    """The config sub-config of scheduler `name`: its dataclass fields and defaults."""
    out = {}
    for f in dataclasses.fields(SCHEDULERS[name]):
        if f.name in _NOT_FIELDS:
            continue
        out[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    out.update(SCHEDULERS[name].config_defaults)  # e.g. PAIR's 0 = derive from the task
    return out


def estimator_defaults(name: str) -> dict:
    """The config sub-config `select.<name>` of difficulty estimator `name` ("graph")."""
    return {f.name: f.default for f in dataclasses.fields(ESTIMATORS[name])}


def build_scheduler(c: ml_collections.ConfigDict, task=None, tokenizer=None):
    """The scheduler of `config.select` (ValueError naming the config field on bad values).

    Args:
      c: the run config.
      task, tokenizer: the run's, for a scheduler that derives options from them
        (`run_options`: PAIR's remaining-token prior); None in `validate`, which
        builds the scheduler without the task.
    Returns:
      The scheduler object.
    """
    name = c.select.name
    kw = SCHEDULERS[name].run_options(c.select[name].to_dict(), c, task, tokenizer)
    difficulty = c.select.estimator or None
    if difficulty == "graph":  # built here so that its errors name config.select.graph
        if c.select.graph.neighbours >= c.task.train_size:
            raise ValueError(
                f"config.select.graph.neighbours = {c.select.graph.neighbours} must be below "
                f"config.task.train_size = {c.task.train_size}"
            )
        try:
            kw["estimator"] = make_estimator("graph", **c.select.graph.to_dict())
        except (ValueError, TypeError) as err:
            raise ValueError(f"config.select.graph: {err}") from err
        difficulty = None
    try:
        return make_scheduler(name, difficulty=difficulty, **kw)
    except (ValueError, TypeError) as err:
        raise ValueError(f"config.select.{name}: {err}") from err


def needs_embeddings(c: ml_collections.ConfigDict) -> bool:
    return SCHEDULERS[c.select.name].needs_embeddings or c.select.estimator == "graph"


def budget_of(c: ml_collections.ConfigDict, processes: int = 1) -> Budget:
    """B (this process's share), G and the caps of `config.select`.

    max_rollouts 0 = the scheduler's default (`default_max_rollouts`: 2·B·G;
    dynamic sampling max_rounds·B·G).
    """
    b, g, rounds = c.data.prompts_per_step // processes, c.data.group_size, c.select.max_rounds
    cap = c.select.max_rollouts or SCHEDULERS[c.select.name].default_max_rollouts(b, g, rounds)
    return Budget(b, g, cap, rounds)


@nnx.jit
def _mean_hidden(model, ids_BxT, mask_BxT):
    h = model.forward(ids_BxT, mask_BxT, return_hidden=True, logits="none").hidden
    m = mask_BxT[..., None].astype(h.dtype)
    return jnp.sum(h * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)


def prompt_embeddings(
    model, prompts: list[list[int]], pad_id: int, batch: int = 64, mesh=None
) -> np.ndarray:
    """[N, D] float32 mean final hidden state of each prompt under `model`.

    Args:
      model: the policy (a Transformer).
      prompts: N token lists.
      pad_id: token written at padding positions.
      batch: rows per forward pass (the last batch is padded: one compile).
      mesh: the policy's mesh; with several processes every process feeds the same
        rows (a global batch of copies) and reads back the first copy.
    Returns:
      [N, D] embeddings.
    """
    width = max(len(p) for p in prompts)
    out = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        ids = np.full((batch, width), pad_id, np.int32)
        mask = np.zeros((batch, width), bool)
        for r, p in enumerate(chunk):
            ids[r, width - len(p) :] = p
            mask[r, width - len(p) :] = True
        mask[len(chunk) :, -1] = True  # idle rows: one token, so no empty softmax
        if mesh is not None and jax.process_count() > 1:
            ids, mask = distributed.host_local_to_global((ids, mask), mesh)
        hidden = distributed.to_host(_mean_hidden(model, jnp.asarray(ids), jnp.asarray(mask)))
        out.append(hidden[: len(chunk)])
    return np.concatenate(out).astype(np.float32)
