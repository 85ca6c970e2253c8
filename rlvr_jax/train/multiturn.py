"""SFT and evaluation on multi-turn episodes (a policy acting against an environment).

* `reference_segments(env, turns)`: replays reference model turns through an
  environment and interleaves its observations: [(text, is_model), ...].
* `encode_episode(tokenizer, prompt, segments)`: token ids in the chat layout of
  `rlvr_jax.rollout.multiturn` and a loss mask that covers the model turns and
  their end-of-turn tokens, never the prompt or the observations.
  (`rlvr_jax.train.sft.train_sft_encoded` trains on them.)
* `evaluate_episodes(model, tokenizer, task, ...)`: pass@k with real episodes
  (`run_episodes`), in the format of `evaluate_task`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.rollout.multiturn import Env, observation_ids, run_episodes
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT, Problem, Task
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train.evaluate import summarize_samples
from rlvr_jax.train.sft import (
    encode_prompt,
    end_of_turn_id,
)

log = logging.getLogger(__name__)


def reference_segments(env: Env, turns: Sequence[str]) -> list[tuple[str, bool]]:
    """Replays model turns through `env`: [(turn, True), (observation, False), ...].

    Args:
      env: a fresh environment of the problem.
      turns: the model side of a reference episode, in order.
    Returns:
      The segments; a model turn is stored without trailing whitespace (its
      end-of-turn token closes it). ValueError if the environment ends the
      episode before the last turn or does not end it after the last turn.
    """
    segments = []
    for i, turn in enumerate(turns):
        segments.append((turn.rstrip(), True))
        result = env.step(turn)
        last = i == len(turns) - 1
        if result.done != last:
            raise ValueError(f"reference turn {i} of {len(turns)}: env done={result.done}")
        if not last:
            segments.append((result.observation, False))
    return segments


def encode_episode(tokenizer: Tokenizer, prompt: str, segments: Sequence[tuple[str, bool]]):
    """Token ids of one multi-turn SFT example and its loss mask.

    Layout: the chat-rendered user prompt; each model turn followed by the
    end-of-turn token (trained); each observation as `observation_ids` (not
    trained), exactly as `run_episodes` builds its context.

    Args:
      tokenizer: the tokenizer.
      prompt: the user message.
      segments: (text, is_model) pairs from `reference_segments`.
    Returns:
      (ids_T, loss_mask_T): int32 and bool NumPy arrays.
    """
    ids = encode_prompt(tokenizer, prompt)
    mask = [False] * len(ids)
    eot = end_of_turn_id(tokenizer)
    for text, is_model in segments:
        part = tokenizer.encode(text) + [eot] if is_model else observation_ids(tokenizer, text)
        ids += part
        mask += [is_model] * len(part)
    return np.asarray(ids, np.int32), np.asarray(mask, bool)


def episode_example(tokenizer: Tokenizer, problem: Problem, env: Env, turns: Sequence[str]):
    """`encode_episode` of `problem`'s episode when `turns` are played in the fresh `env`."""
    return encode_episode(tokenizer, problem.prompt, reference_segments(env, turns))


def evaluate_episodes(
    model: Transformer,
    tokenizer: Tokenizer,
    task: Task,
    *,
    env_factory: Callable[[Problem], Env],
    max_turns: int,
    split: str = "test",
    num_problems: int = 64,
    n_samples: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    prompts_per_batch: int = 32,
    start: int = 0,
    split_processes: bool = False,
    sampler: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Runs `n_samples` episodes per problem and reports pass@k like `evaluate_task`.

    An episode is correct when the environment's final result has reason CORRECT.

    Args:
      model, tokenizer, task: the policy, its tokenizer and the task of the problems.
      env_factory: a fresh environment per episode, e.g. `task.env`.
      max_turns: model turns per episode (see `run_episodes`).
      split, num_problems, n_samples, temperature, seed, prompts_per_batch, start,
        split_processes, sampler: as `evaluate_task` (with `split_processes` each
        process runs the episodes of its share of the problems and all gather every
        problem's).
      max_new_tokens: decode budget per turn.
    Returns:
      `evaluate_task`'s dict ("pass@1", f"pass@{n}", "mean_reward", "reasons",
      "num_correct", "mean_response_tokens" (sampled tokens over all turns),
      "stopped_fraction" (last turn ended with a stop token), "example") plus
      "mean_turns", also as "task_metrics" {"mean_turns": ...}.
    """
    params = SamplingParams(
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        stop_token_ids=tokenizer.stop_ids,
        n=n_samples,
    )
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model, pad_id=pad_id, **dict(sampler or {}))
    problems = task.problems(num_problems, split, start=start)
    key = jax.random.PRNGKey(seed)
    mine = distributed.my_shard(num_problems, split_processes)
    records: list[dict[str, Any]] = []  # per entry of `mine`: its episodes
    for lo in range(0, len(mine), prompts_per_batch):
        ids = mine[lo : lo + prompts_per_batch]
        chunk = [problems[i] for i in ids]
        ep = run_episodes(
            sampler,
            tokenizer,
            chunk,
            env_factory,
            params,
            jax.random.fold_in(key, lo),
            max_turns=max_turns,
        )
        mask = ep.rollout.response_mask.sum(axis=1)
        per = [dict(rewards=[], reasons=[], lengths=[], stopped=[], turns=[]) for _ in chunk]
        for b, result in enumerate(ep.results):
            r = per[ep.problem_index[b]]
            r["reasons"].append(result.info["reason"])
            r["rewards"].append(float(ep.rewards[b]))
            r["lengths"].append(int(mask[b]))
            r["stopped"].append(bool(ep.rollout.stopped[b]))
            r["turns"].append(int(ep.num_turns[b]))
            r.setdefault("example", ep.turns[b])
        records += per
    ordered = distributed.gather_shards(mine, records, num_problems, split_processes)
    rows = lambda field: [v for r in ordered for v in r[field]]  # noqa: E731
    example = dict(
        prompt=problems[0].prompt, turns=ordered[0]["example"], reason=ordered[0]["reasons"][0]
    )
    reasons = Counter(rows("reasons"))
    num_correct = [sum(x == CORRECT for x in r["reasons"]) for r in ordered]
    turns = rows("turns")
    out = summarize_samples(
        n_samples,
        temperature,
        rows("rewards"),
        reasons,
        num_correct,
        rows("lengths"),
        rows("stopped"),
        example,
    )
    out["mean_turns"] = float(np.mean(turns))
    # The task statistics every evaluation reports (the RL trainer logs them): an
    # episode's is its model turns (a task's group_metrics read single replies).
    out["task_metrics"] = {"mean_turns": out["mean_turns"]}
    return out
