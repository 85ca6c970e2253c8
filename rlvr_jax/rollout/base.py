"""The rollout stage: what a plug-in gets (`RolloutContext`), returns (`Groups`), the registry.

  @ROLLOUTS.register("plain")
  def plain(ctx: RolloutContext, **options) -> Groups

`ctx.request` names the problems (one group each), the rows of each (`counts`,
contiguous), optionally forced prefixes to continue (PAIR) and the round's
budget. A plug-in returns one row per requested row, in order, verified
(`score.score_rows`), with the behaviour log-probs μ it actually sampled from
and masks in which forced or environment tokens are context, never response.
`config.rollout.name` picks the plug-in; its options are `config.rollout.<name>.*`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from rlvr_jax.registry import Registry
from rlvr_jax.rollout import score
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams
from rlvr_jax.tasks.base import Problem, Task
from rlvr_jax.tokenizers import Tokenizer

ROLLOUTS = Registry("rollout")

# Tasks with an evaluation besides pass@k, by task name, each added by the plug-in module
# that owns it (`@task_evaluator("spy_describe")`): fn(sampler, tokenizer, problems,
# params, key, frozen_state) -> metrics, frozen_state the run's initial policy (the "who is
# the spy" games against a frozen opponent, whatever the rollout).
EVALUATORS: dict[str, Callable[..., dict]] = {}


def task_evaluator(task_name: str) -> Callable[[Callable], Callable]:
    """Decorator: registers fn as task `task_name`'s own evaluation (`EVALUATORS`)."""

    def wrap(fn: Callable) -> Callable:
        if task_name in EVALUATORS:
            raise ValueError(f"task {task_name!r} already has an evaluator")
        EVALUATORS[task_name] = fn
        return fn

    return wrap


@dataclasses.dataclass(frozen=True)
class Prefix:
    """Response tokens a row continues from, with their log-probs and entropies (same weights)."""

    tokens: Sequence[int]
    logps: np.ndarray
    entropy: np.ndarray


@dataclasses.dataclass(frozen=True)
class Request:
    """The rows one select round asks for.

    Attributes:
      problems: one problem per group; counts: [len(problems)] rows of each group.
      prefixes: optional, per row: a Prefix to continue (its tokens become the
        row's first response tokens, with its log-probs) or None.
      max_new_tokens: the round's generation budget (0: the sampling params').
    """

    problems: Sequence[Problem]
    counts: np.ndarray
    prefixes: Sequence[Prefix | None] | None = None
    max_new_tokens: int = 0

    @property
    def group_R(self) -> np.ndarray:
        """[R] int32 group of each requested row."""
        return np.repeat(np.arange(len(self.problems), dtype=np.int32), self.counts)


@dataclasses.dataclass(frozen=True)
class RolloutContext:
    """What a rollout plug-in may use.

    Attributes:
      sampler: samples with the current policy weights (or `state=`).
      tokenizer, task: prompts and decoding; the verifier (and environment).
      policy_state: `nnx.state` of the current policy, for plug-ins that sample
        with modified weights.
      sampling: the run's sampling parameters (n is ignored: see `request`).
      key: this round's PRNG key; request: the rows to generate.
      overlong_cache, overlong_penalty: DAPO's soft overlong penalty (0 = off).
      cache: per run: what a plug-in builds once (compiled programs, models).
    """

    sampler: Sampler
    tokenizer: Tokenizer
    task: Task
    policy_state: Any
    sampling: SamplingParams
    key: jax.Array
    request: Request
    overlong_cache: int = 0
    overlong_penalty: float = 1.0
    cache: dict[str, Any] = dataclasses.field(default_factory=dict)

    def params(self, **changes) -> SamplingParams:
        """Sampling parameters of one row per prompt copy (n = 1) with the round's budget."""
        budget = self.request.max_new_tokens or self.sampling.max_new_tokens
        return dataclasses.replace(self.sampling, n=1, max_new_tokens=budget, **changes)


def continue_prefixes(ro: Rollout, prefixes: Sequence[Prefix | None] | None) -> Rollout:
    """The rows with each forced prefix turned back into response tokens (its log-probs)."""
    if prefixes is None:
        return ro
    resp, logps, ent = ro.response_mask.copy(), ro.logps.copy(), ro.entropy.copy()
    for r, prefix in enumerate(prefixes):
        if prefix is not None and len(prefix.tokens):
            forced = ro.attention_mask[r] & ~ro.prompt_mask[r] & ~resp[r]
            logps[r][forced], ent[r][forced] = prefix.logps, prefix.entropy
            resp[r] |= forced
    return dataclasses.replace(ro, response_mask=resp, logps=logps, entropy=ent)


def truncate(ro: Rollout, keep_R, stop_ids) -> Rollout:
    """Each row's sampled tokens cut to its first keep_R[r] (stopped: it ends with a stop id).

    Cut tokens leave every mask and their log-probs and entropies become 0, so a
    later `Sampler.continue_rollout` continues after the kept ones.
    """
    resp = ro.response_mask.copy()
    n = np.cumsum(resp, axis=-1)
    drop = resp & (n > np.asarray(keep_R)[:, None])
    resp &= ~drop
    stopped = np.array([
        bool(resp[r].any()) and int(ro.tokens[r][resp[r]][-1]) in stop_ids
        for r in range(len(resp))
    ])  # fmt: skip
    zero = lambda x: np.where(drop, 0, x)  # noqa: E731
    return dataclasses.replace(
        ro,
        attention_mask=ro.attention_mask & ~drop,
        response_mask=resp,
        logps=zero(ro.logps),
        sampling_logps=zero(ro.sampling_logps),
        entropy=zero(ro.entropy),
        stopped=stopped,
    )


def scored_groups(ctx: RolloutContext, ro: Rollout, info=None) -> Groups:
    """Groups of the requested rows from their Rollout (`ro.logps` = μ): verified, shaped.

    Args:
      ctx: the context (its request gives the rows' groups and problems).
      ro: one row per requested row.
      info: optional per-row arrays (see `Groups.info`).
    """
    req = ctx.request
    group = req.group_R
    groups = Groups(
        tokens=ro.tokens,
        attention_mask=ro.attention_mask,
        prompt_mask=ro.prompt_mask,
        response_mask=ro.response_mask,
        behaviour_logps=ro.logps,
        entropy=ro.entropy,
        group=group,
        valid=np.ones(len(group), bool),
        rewards=np.zeros(len(group), np.float32),
        correct=np.zeros(len(group), bool),
        stopped=np.asarray(ro.stopped, bool),
        reasons=[""] * len(group),
        problems=list(req.problems),
        info=dict(info or {}),
    )
    return verified(ctx, groups)


def verified(ctx: RolloutContext, groups: Groups) -> Groups:
    """`groups` with the verifier's verdicts and DAPO's overlong shaping.

    A row's answer is everything after its prompt: the sampled tokens and any
    forced prefix the policy's response continues (a CBPO branch's copy of its
    parent's tokens), in order; its length for the overlong penalty likewise.
    """
    after = groups.attention_mask & ~groups.prompt_mask
    answers = [groups.tokens[r][after[r]].tolist() for r in range(len(groups.group))]
    problems = [groups.problems[g] for g in groups.group]
    v = score.score_rows(ctx.task, ctx.tokenizer, problems, answers, ctx.tokenizer.stop_ids)
    rewards = score.overlong_shaping(
        v.rewards.astype(np.float32),
        after.sum(-1),
        max_len=ctx.sampling.max_new_tokens,
        cache=ctx.overlong_cache,
        penalty=ctx.overlong_penalty,
    )
    return dataclasses.replace(
        groups, rewards=np.asarray(rewards, np.float32), correct=v.correct, reasons=v.reasons
    )
