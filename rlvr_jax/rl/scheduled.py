"""The select stage driven by a stateful scheduler (SARA, VIGOR, PAIR, LEEPS, difficulty, ...).

`config.select.name` in SCHEDULED routes an RL step through
`rlvr_jax.scheduling.run_step`: the scheduler proposes rows round by round,
`ScheduledSelect` samples them (one row per plan entry, `SamplingParams(n=1)`),
verifies the finished ones and returns `Outcomes`; the final `Selection` is
packed into a fixed-shape `Groups` batch of B·G rows (groups of any size,
padding rows masked out), so the jitted update sees one shape per run.

PAIR: round 0 samples `prefix_tokens` tokens per candidate; a later round
continues the chosen candidates with the prefix passed as `prefixes=` (the
sampler forces it) for at most L_max − prefix_tokens more tokens. The trained
row is the continuation with the prefix turned back into response tokens,
carrying the prefix round's log-probs (same weights, so they are exact). The
prefix features the predictor sees (ours): the prefix's mean sampled-token
log-prob and mean entropy (F = 2). The "pair" credit transform replaces the
estimator's advantage with `pair_math.pair_advantages` (unclipped,
unstandardised), using the inclusion probabilities the batch carries.

PAIR's remaining-token prior (`select.pair.prior_remaining`, 0 = derived): the
mean token length of the task's reference solutions (plus the end-of-turn
token) over the first train problems, minus the prefix, clipped to
[1, L_max − prefix_tokens] (`remaining_token_prior`). It only sets the
predictor's guess before any candidate completed; the ridge regression on
observed lengths takes over after the first step.

Embeddings (LEEPS neighbours, the graph estimator's kNN graph): the initial
policy's mean final hidden state over each prompt's tokens, computed once at
start (before any restore, so a resumed run computes the same ones). The graph
estimator's settings are `config.select.graph` (GraphEstimator's fields).
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax.core.rewards import soft_overlong_penalty
from rlvr_jax.rl import credit
from rlvr_jax.rl.rollout import Groups
from rlvr_jax.sampling import SamplingParams
from rlvr_jax.scheduling import (
    SCHEDULERS,
    Budget,
    Outcomes,
    Pool,
    make_scheduler,
    pair_math,
    run_step,
)
from rlvr_jax.scheduling.estimators import ESTIMATORS, make_estimator
from rlvr_jax.scheduling.leeps import neighbour_overlap
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.train.evaluate import cut_at_stop
from rlvr_jax.train.sft import encode_prompt

log = logging.getLogger(__name__)

# Registry names handled by rlvr_jax.rl.select (kept on their original path).
LEGACY = ("uniform", "dynamic_sampling")
SCHEDULED = tuple(n for n in SCHEDULERS if n not in LEGACY)
# Scheduler dataclass fields that are not config fields: the estimator is chosen
# by `select.estimator` (its settings: `select.graph`); the prefix features are fixed here.
_NOT_FIELDS = ("estimator", "num_features")
NUM_FEATURES = 2
ESTIMATOR_NAMES = ("", "beta", "graph")


# Config defaults that differ from the dataclass's: 0 = derive from the task at start.
_CONFIG_DEFAULTS = {"pair": {"prior_remaining": 0.0}}


def scheduler_defaults(name: str) -> dict:
    """The config sub-config of scheduler `name`: its dataclass fields and defaults."""
    out = {}
    for f in dataclasses.fields(SCHEDULERS[name]):
        if f.name in _NOT_FIELDS:
            continue
        out[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    out.update(_CONFIG_DEFAULTS.get(name, {}))
    return out


def estimator_defaults(name: str) -> dict:
    """The config sub-config `select.<name>` of difficulty estimator `name` ("graph")."""
    return {f.name: f.default for f in dataclasses.fields(ESTIMATORS[name])}


def build_scheduler(c: ml_collections.ConfigDict, prior_remaining: float = 0.0):
    """The scheduler of `config.select` (ValueError naming the config field on bad values).

    Args:
      c: the run config.
      prior_remaining: PAIR's derived remaining-token prior, used when
        `select.pair.prior_remaining` is 0 (0 here too: L_max − prefix_tokens,
        the cap, so that `validate` can build the scheduler without the task).
    Returns:
      The scheduler object.
    """
    name = c.select.name
    kw = c.select[name].to_dict()
    if name == "pair":
        kw["num_features"] = NUM_FEATURES
        if not kw["prior_remaining"]:
            cap = max(c.rollout.max_new_tokens - kw["prefix_tokens"], 1)
            kw["prior_remaining"] = prior_remaining or float(cap)
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


def needs_embeddings(c: ml_collections.ConfigDict) -> bool:
    return c.select.name == "leeps" or c.select.estimator == "graph"


def budget_of(c: ml_collections.ConfigDict) -> Budget:
    """B, G and the caps of `config.select` (max_rollouts 0 = 2·B·G)."""
    b, g = c.data.prompts_per_step, c.data.group_size
    return Budget(b, g, c.select.max_rollouts or 2 * b * g, c.select.max_rounds)


@nnx.jit
def _mean_hidden(model, ids_BxT, mask_BxT):
    h = model.forward(ids_BxT, mask_BxT, return_hidden=True, logits="none").hidden
    m = mask_BxT[..., None].astype(h.dtype)
    return jnp.sum(h * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)


def prompt_embeddings(model, prompts: list[list[int]], pad_id: int, batch: int = 64) -> np.ndarray:
    """[N, D] float32 mean final hidden state of each prompt under `model`.

    Args:
      model: the policy (a Transformer).
      prompts: N token lists.
      pad_id: token written at padding positions.
      batch: rows per forward pass (the last batch is padded: one compile).
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
        out.append(
            np.asarray(_mean_hidden(model, jnp.asarray(ids), jnp.asarray(mask)))[: len(chunk)]
        )
    return np.concatenate(out).astype(np.float32)


def verify(task, tokenizer, problem, response_tokens, stop_ids) -> tuple[float, bool, str]:
    """(reward, correct, reason) of one complete response (the score stage for one row)."""
    text = tokenizer.decode(cut_at_stop(response_tokens, stop_ids))
    verdict = task.verify(problem, text)
    return float(verdict.reward), verdict.reason == CORRECT, verdict.reason


_ROW = ("tokens", "attention_mask", "prompt_mask", "response_mask", "logps", "entropy")


class ScheduledSelect:
    """A scheduler, its state and the sampler adapter for one run.

    Attributes:
      scheduler: the scheduler object; state: its state (checkpointed by the trainer).
      budget: the per-step Budget.
    """

    def __init__(self, c, model, tokenizer, task, sampler, pad_id: int):
        self.c, self.tokenizer, self.task, self.sampler = c, tokenizer, task, sampler
        prior = 0.0
        if c.select.name == "pair" and not c.select.pair.prior_remaining:
            prior = remaining_token_prior(
                task, tokenizer, c.select.pair.prefix_tokens, c.rollout.max_new_tokens
            )
            log.info("PAIR remaining-token prior (from the task): %.1f tokens", prior)
        self.model, self.pad_id = model, pad_id  # the policy, updated in place by the trainer
        self.scheduler = build_scheduler(c, prior_remaining=prior)
        self.budget = budget_of(c)
        n = c.task.train_size
        self._problems = {}
        embeddings = None
        if needs_embeddings(c):
            prompts = [self._encoded(i) for i in range(n)]
            embeddings = prompt_embeddings(model, prompts, pad_id)
        self.state = self.scheduler.init(Pool(n, embeddings=embeddings), self.budget)

    def _problem(self, index: int):
        if index not in self._problems:
            self._problems[index] = self.task.problem(int(index), "train")
        return self._problems[index]

    def _encoded(self, index: int) -> list[int]:
        return encode_prompt(self.tokenizer, self._problem(index).prompt)

    def _params(self, max_new_tokens: int) -> SamplingParams:
        r = self.c.rollout
        return SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_new_tokens=max_new_tokens,
            stop_token_ids=self.tokenizer.stop_ids,
            n=1,
        )

    def step(self, key: jax.Array) -> tuple[Groups, dict[str, float], dict[str, np.ndarray]]:
        """One RL step's select + rollout + score.

        Args:
          key: the step's PRNG key (scheduler rounds and sampling derive from it).
        Returns:
          (groups, stats, fields): B·G rows (padding rows invalid), the step's
          statistics, and the extra batch fields incl_prob_B, candidates_B.
        """
        refreshed = self._refresh_neighbours()
        rows: dict[int, dict] = {}  # rollout id -> its row arrays and verdict
        l_max = self.c.rollout.max_new_tokens
        sample_key = jax.random.fold_in(key, 1)

        def sample(plan) -> Outcomes:
            prefixes = None
            budget = plan.max_tokens or l_max
            if plan.cont_R.any():
                prefixes = [
                    rows[int(i)]["sampled"] if c else []
                    for i, c in zip(plan.rollout_R, plan.cont_R, strict=True)
                ]
                budget = l_max - max(len(p) for p in prefixes)
            prompts = [self._encoded(int(p)) for p in plan.prompt_R]
            ro = self.sampler.sample(
                prompts,
                self._params(max(budget, 1)),
                jax.random.fold_in(sample_key, plan.round),
                prefixes=prefixes,
            )
            return self._outcomes(plan, ro, rows, prefixes)

        self.state, sel = run_step(self.scheduler, self.state, key, self.budget, sample)
        groups, stats, fields = self._pack(sel, rows)
        stats.update(refreshed)
        return groups, stats, fields

    def _refresh_neighbours(self) -> dict[str, float]:
        """LEEPS: the pool re-embedded with the current policy every `refresh_every` steps.

        Returns the step's stats: "select/leeps_neighbour_overlap", the share of
        neighbour pairs the refresh kept (only on refresh steps).
        """
        every = self.c.select.leeps.refresh_every if self.c.select.name == "leeps" else 0
        step = int(self.state["step"])
        if not every or step == 0 or step % every:
            return {}
        prompts = [self._encoded(i) for i in range(self.c.task.train_size)]
        old = self.state["leeps"]["nbr"]
        embeddings = prompt_embeddings(self.model, prompts, self.pad_id)
        self.state = self.scheduler.refresh_neighbours(self.state, embeddings)
        overlap = neighbour_overlap(old, self.state["leeps"]["nbr"])
        log.info("step %d: LEEPS neighbours re-embedded (overlap %.3f)", step, overlap)
        return {"select/leeps_neighbour_overlap": overlap}

    def _outcomes(self, plan, ro, rows, prefixes) -> Outcomes:
        """Verifies finished rows, stores every valid row under its rollout id."""
        n = plan.num_rows
        reward, correct = np.zeros(n, np.float32), np.zeros(n, bool)
        finished = np.ones(n, bool) if not plan.max_tokens else np.asarray(ro.stopped, bool)
        new_tokens = ro.response_mask.sum(-1).astype(np.int32)
        feats = np.zeros((n, NUM_FEATURES), np.float32)
        stop_ids = self.tokenizer.stop_ids
        for b in range(n):
            m = ro.response_mask[b]
            if m.any():
                feats[b] = ro.logps[b][m].mean(), ro.entropy[b][m].mean()
            if not plan.valid_R[b]:
                continue
            row = {f: getattr(ro, f)[b].copy() for f in _ROW}
            row["stopped"] = bool(ro.stopped[b])
            if prefixes is not None and plan.cont_R[b]:
                prev = rows[int(plan.rollout_R[b])]
                forced = row["attention_mask"] & ~row["prompt_mask"] & ~row["response_mask"]
                row["logps"][forced] = prev["logps"][prev["response_mask"]]
                row["entropy"][forced] = prev["entropy"][prev["response_mask"]]
                row["response_mask"] = row["response_mask"] | forced
            row["sampled"] = row["tokens"][row["response_mask"]].tolist()
            if finished[b]:
                problem = self._problem(int(plan.prompt_R[b]))
                r, ok, reason = verify(self.task, self.tokenizer, problem, row["sampled"], stop_ids)
                if self.c.reward.overlong_cache:
                    r += float(
                        soft_overlong_penalty(
                            np.asarray([len(row["sampled"])]),
                            max_len=self.c.rollout.max_new_tokens,
                            cache_len=self.c.reward.overlong_cache,
                            penalty=self.c.reward.overlong_penalty,
                        )[0]
                    )
                reward[b], correct[b], row["reason"] = r, ok, reason
                row["reward"], row["correct"] = r, ok
            rows[int(plan.rollout_R[b])] = row
        return Outcomes(reward, correct, new_tokens, finished, feats)

    def _pack(self, sel, rows) -> tuple[Groups, dict[str, float], dict[str, np.ndarray]]:
        """The Selection as B·G fixed rows; groups past that many rows are dropped (logged)."""
        b, g = self.c.data.prompts_per_step, self.c.data.group_size
        cap = b * g
        keep_groups, used = 0, 0
        for p in range(sel.num_groups):
            size = int(np.sum(sel.group_R == p))
            if used + size > cap:
                break
            keep_groups, used = keep_groups + 1, used + size
        ids = sel.rollout_R[:used]
        group = sel.group_R[:used].astype(np.int32)
        # Padding rows copy a sampled row and sit in their own group (masked out anyway).
        filler = int(ids[0]) if used else next(i for i, r in rows.items() if "reward" in r)
        all_ids = np.concatenate([ids, np.full(cap - used, filler)]).astype(int)
        group = np.concatenate([group, np.full(cap - used, keep_groups, np.int32)])
        width = max(len(rows[int(i)]["tokens"]) for i in all_ids)

        def stack(field):
            out = []
            for i in all_ids:
                a = rows[int(i)][field]
                out.append(np.pad(a, (width - len(a), 0)))
            return np.stack(out)

        done = [r for r in rows.values() if "reward" in r]
        problems = [self._problem(int(p)) for p in sel.prompt_P[:keep_groups]]
        problems += [problems[0] if problems else self._problem(0)] * (cap - keep_groups)
        groups = Groups(
            **{f: stack(f) for f in _ROW},
            group=group,
            valid=np.arange(cap) < used,
            rewards=np.array([rows[int(i)].get("reward", 0.0) for i in all_ids], np.float32),
            correct=np.array([rows[int(i)].get("correct", False) for i in all_ids], bool),
            stopped=np.array([rows[int(i)]["stopped"] for i in all_ids], bool),
            reasons=[rows[int(i)].get("reason", "") for i in all_ids],
            problems=problems,
        )
        incl = np.concatenate([sel.incl_prob_R[:used], np.ones(cap - used)]).astype(np.float32)
        cands = np.concatenate([sel.candidates_P[group[:used]], np.full(cap - used, g)])
        fields = {"incl_prob_B": incl, "candidates_B": cands.astype(np.int32)}
        stats = {f"select/{k}": float(v) for k, v in sel.stats.items()}
        stats.update(
            kept_groups=float(keep_groups),
            dropped_groups=float(sel.num_groups - keep_groups),
            reward=float(np.mean([r["reward"] for r in done])) if done else 0.0,
            pass_rate=float(np.mean([r["correct"] for r in done])) if done else 0.0,
        )
        return groups, stats, fields


@credit.TRANSFORMS.register("pair", requires=("incl_prob_B", "candidates_B"))
def pair_transform(adv_BxT, batch):
    """PAIR: replaces the advantage with the pair-inclusion-weighted leave-one-out one.

    Â_i = 1/(G−1) Σ_{j≠i, same group} (r_i − r_j) / (π_i π_j) (`pair_math.pair_advantages`),
    unclipped and unstandardised; with every π = 1 it equals RLOO's advantage.
    Needs the PAIR scheduler's batch fields (incl_prob_B, candidates_B).
    """
    del adv_BxT
    a_B = pair_math.pair_advantages(
        jnp.asarray(batch["rewards_B"], jnp.float32),
        jnp.asarray(batch["group_B"]),
        jnp.asarray(batch["valid_B"], bool),
        jnp.asarray(batch["incl_prob_B"], jnp.float32),
        jnp.asarray(batch["candidates_B"]),
    )
    return jnp.where(jnp.asarray(batch["mask_BxT"], bool), a_B[:, None], 0.0)
