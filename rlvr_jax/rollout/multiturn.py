"""Multi-turn episodes: the policy acts, an environment answers, until every episode ends.

`run_episodes` is the loop (SFT evaluation and the RL rollout "multi_turn" both
run it); in a multi-process run every process takes the same number of turns.

The chat layout of one episode (ChatML, as the tokenizer's chat template):

    <|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n      prompt
    {turn 1}<|im_end|>                                                 sampled
    \\n<|im_start|>tool\\n{observation 1}<|im_end|>\\n<|im_start|>assistant\\n   forced
    {turn 2}<|im_end|>                                                 sampled
    ...

A turn ends when the policy samples a stop token (or runs out of
`max_new_tokens`); its text goes to `env.step`, whose observation is rendered by
`observation_ids` and appended with `Sampler.continue_rollout`, so observation
tokens are in `attention_mask` but never in `response_mask` (the loss and the
log-probs only cover what the policy sampled). The SFT encoding of reference
episodes (`rlvr_jax.train.multiturn`) uses the same `observation_ids`.

An environment is any object with `step(turn_text) -> StepResult-like` (fields
`observation: str | None`, `done: bool`, `reward: float | None`, `info: dict`),
e.g. `rlvr_jax.tasks.tools.ToolEnv` built by `task.env(problem)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, truncate
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT, MALFORMED, Problem
from rlvr_jax.tokenizers import Tokenizer, cut_at_stop


class StepLike(Protocol):
    observation: str | None
    done: bool
    reward: float | None
    info: dict[str, Any]


class Env(Protocol):
    def step(self, turn_text: str) -> StepLike: ...


def observation_text(observation: str) -> str:
    """The text appended after a turn's end-of-turn token: a `tool` message, then the
    assistant header of the next turn. Surrounding newlines of `observation` are dropped."""
    return f"\n<|im_start|>tool\n{observation.strip()}<|im_end|>\n<|im_start|>assistant\n"


def observation_ids(tokenizer: Tokenizer, observation: str) -> list[int]:
    """Token ids of `observation_text(observation)` (forced, never trained on).

    Args:
      tokenizer: a tokenizer whose vocabulary has the ChatML special tokens.
      observation: the environment's observation text.
    Returns:
      The ids, a list of ints.
    """
    return tokenizer.encode(observation_text(observation))


@dataclasses.dataclass
class Episodes:
    """Finished multi-turn episodes, one per rollout row (B = len(problems) * n).

    Attributes:
      rollout: every turn of every row in one Rollout (observations are forced
        tokens: in `attention_mask`, not in `response_mask`).
      rewards: [B] float32, the environment's final reward (0 for a row cut at
        `max_turns` without the environment ending it).
      results: per row, the environment's final step result (a synthetic
        MALFORMED one for a cut row).
      turns: per row, the model turns' texts (cut at the stop token).
      observations: per row, the observation texts appended after the turns.
      done: [B] bool, the environment ended the episode.
      problem_index: [B] int32, index into `problems` of each row (= rollout.group).
    """

    rollout: Rollout
    rewards: np.ndarray
    results: list[Any]
    turns: list[list[str]]
    observations: list[list[str]]
    done: np.ndarray
    problem_index: np.ndarray

    @property
    def num_turns(self) -> np.ndarray:
        """[B] int32, model turns taken per row."""
        return np.asarray([len(t) for t in self.turns], np.int32)


@dataclasses.dataclass(frozen=True)
class _CutResult:
    observation: str | None
    done: bool
    reward: float | None
    info: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Resume:
    """Where a row's episode resumes (a CBPO branch inside a model turn of another episode).

    Attributes:
      tokens: the forced tokens after the prompt: earlier turns and their
        observations, then the start of the unfinished turn (context: never in
        `response_mask`).
      turns: the texts of the finished model turns in `tokens`, replayed into a
        fresh environment (which must answer them with `observations` again).
      observations: the observation text after each of `turns`.
      turn_start: index in `tokens` where the unfinished turn begins; the turn's
        text is `tokens[turn_start:]` and what the row samples next, and its
        sampled part is cut so the turn holds at most `max_new_tokens` tokens.
    """

    tokens: Sequence[int]
    turns: Sequence[str]
    observations: Sequence[str]
    turn_start: int


def run_episodes(
    sampler: Sampler,
    tokenizer: Tokenizer,
    problems: Sequence[Problem],
    env_factory: Callable[[Problem], Env],
    params: SamplingParams,
    key: jax.Array,
    *,
    max_turns: int,
    state=None,
    resume: Sequence[Resume | None] | None = None,
) -> Episodes:
    """Runs `params.n` episodes per problem to completion, all rows batched per turn.

    Args:
      sampler: the policy's Sampler (its pad id and cache limit apply).
      tokenizer: renders prompts (chat template) and observations, decodes turns.
      problems: the problems; each is rendered as one user message.
      env_factory: builds a fresh environment for one row, e.g. `task.env`.
      params: sampling parameters of every turn; `max_new_tokens` is per turn, and
        `stop_token_ids` (default: the tokenizer's stop ids) end a turn.
      key: PRNG key; turn t samples with `fold_in(key, t)`.
      max_turns: most model turns per episode; rows still running after it are cut
        (reward 0, reason MALFORMED). For ToolEnv, `task.max_turns + 1` lets the
        environment end every episode itself.
      state: model state to sample with (default: the sampler's model).
      resume: optional, per row (len(problems) * n): a Resume to continue from
        (its finished turns count towards max_turns) or None (a fresh episode).
    Returns:
      Episodes.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if not params.stop_token_ids:
        params = dataclasses.replace(params, stop_token_ids=tuple(tokenizer.stop_ids))
    stop_ids = params.stop_token_ids
    prompts = [tokenizer.encode_chat([{"role": "user", "content": p.prompt}]) for p in problems]
    rows = len(prompts) * params.n
    resume = [None] * rows if resume is None else list(resume)
    if len(resume) != rows:
        raise ValueError(f"{len(resume)} resume entries for {rows} rows (problems x n)")
    resumed = any(r is not None for r in resume)
    forced = [list(r.tokens) if r is not None else [] for r in resume]
    k0 = jax.random.fold_in(key, 0)
    rollout = sampler.sample(prompts, params, k0, state=state, prefixes=forced if resumed else None)
    # Per row, where its current turn begins among the tokens after the prompt.
    start = np.array([r.turn_start if r is not None else 0 for r in resume], np.int64)
    if resumed:  # a resumed turn keeps at most max_new_tokens
        held = np.array([len(f) for f in forced]) - start
        if (held < 0).any() or (held >= params.max_new_tokens).any():
            raise ValueError("a Resume's unfinished turn must hold 0..max_new_tokens-1 tokens")
        rollout = truncate(rollout, params.max_new_tokens - held, stop_ids)
    envs = [env_factory(problems[g]) for g in rollout.group]
    turns: list[list[str]] = [[] for _ in range(rows)]
    observations: list[list[str]] = [[] for _ in range(rows)]
    for b, r in enumerate(resume):
        if r is not None:
            _replay(envs[b], r, b)
            turns[b], observations[b] = list(r.turns), list(r.observations)
    results: list[Any] = [None] * rows
    active = np.array([len(t) < max_turns for t in turns])
    if not active.all():
        raise ValueError(f"a Resume holds max_turns={max_turns} finished turns already")
    for t in range(max_turns):
        obs_ids: list[list[int] | None] = [None] * rows
        for b in np.flatnonzero(active):
            after = rollout.response_tokens(b)
            text = tokenizer.decode(cut_at_stop(after[start[b] :], stop_ids))
            turns[b].append(text)
            result = envs[b].step(text)
            if result.done:
                results[b], active[b] = result, False
            elif len(turns[b]) < max_turns:
                observations[b].append(result.observation)
                obs_ids[b] = observation_ids(tokenizer, result.observation)
                start[b] = len(after) + len(obs_ids[b])
            else:  # out of turns: the environment has not ended the episode
                info = {"reason": MALFORMED, "detail": f"cut after {max_turns} turns"}
                results[b], active[b] = _CutResult(None, True, 0.0, info), False
        if not distributed.agree(active.any()):  # every process runs the same turns
            break
        rollout = sampler.continue_rollout(
            rollout, obs_ids, params, jax.random.fold_in(key, t + 1), state=state
        )
    rewards = np.asarray([r.reward or 0.0 for r in results], np.float32)
    done = np.asarray([not isinstance(r, _CutResult) for r in results])
    return Episodes(
        rollout=rollout,
        rewards=rewards,
        results=results,
        turns=turns,
        observations=observations,
        done=done,
        problem_index=np.asarray(rollout.group, np.int32),
    )


def _replay(env: Env, resume: Resume, row: int) -> None:
    """Steps a fresh environment through a Resume's finished turns, checking each answer."""
    for u, (text, want) in enumerate(zip(resume.turns, resume.observations, strict=True)):
        got = env.step(text)
        if got.done or got.observation != want:
            raise ValueError(
                f"row {row}: replaying turn {u} gave {'the end' if got.done else got.observation!r}"
                f" instead of {want!r}; only a deterministic environment can be resumed"
            )


def _check(c) -> None:
    if c.reward.overlong_cache:
        raise ValueError(
            "config.reward.overlong_cache penalises one response's length; with "
            "config.rollout.name = 'multi_turn' (responses over several turns) set it to 0"
        )


@ROLLOUTS.register("multi_turn", check=_check, max_turns=0)
def multi_turn(ctx: RolloutContext, *, max_turns) -> Groups:
    """Agentic rows: each is an episode against `task.env(problem)` (`run_episodes`).

    Options: max_turns (model turns per episode; 0 = the task's
    `episode_turns()`, which lets the environment end every episode). The
    reward is the environment's final reward; correct = its reason is CORRECT.
    Observation tokens are context (never in `response_mask`); the log-probs of
    every turn's sampled tokens are μ. Rows report `turns_B` (model turns).
    """
    req = ctx.request
    turns = max_turns or ctx.task.episode_turns()
    if not turns:
        raise ValueError(
            f"config.rollout.name = 'multi_turn' needs a task with an environment "
            f"(tool_lookup); task {ctx.task.name!r} is single-turn"
        )
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'multi_turn' cannot continue prefixes (PAIR)")
    group = req.group_R
    problems = [req.problems[g] for g in group]
    ep = run_episodes(
        ctx.sampler, ctx.tokenizer, problems, ctx.task.env, ctx.params(), ctx.key, max_turns=turns
    )
    ro = ep.rollout
    reasons = [r.info["reason"] for r in ep.results]
    return Groups(
        tokens=ro.tokens,
        attention_mask=ro.attention_mask,
        prompt_mask=ro.prompt_mask,
        response_mask=ro.response_mask,
        behaviour_logps=ro.logps,
        entropy=ro.entropy,
        group=group,
        valid=np.ones(len(group), bool),
        rewards=np.asarray(ep.rewards, np.float32),
        correct=np.asarray([r == CORRECT for r in reasons], bool),
        stopped=np.asarray(ro.stopped, bool),
        reasons=reasons,
        problems=list(req.problems),
        info={"turns_B": ep.num_turns},
    )
