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
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

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
) -> dict[str, Any]:
    """Runs `n_samples` episodes per problem and reports pass@k like `evaluate_task`.

    An episode is correct when the environment's final result has reason CORRECT.

    Args:
      model, tokenizer, task: the policy, its tokenizer and the task of the problems.
      env_factory: a fresh environment per episode, e.g. `task.env`.
      max_turns: model turns per episode (see `run_episodes`).
      split, num_problems, n_samples, temperature, seed, prompts_per_batch, start:
        as `evaluate_task`.
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
    sampler = Sampler(model, pad_id=tokenizer.pad_id if tokenizer.pad_id is not None else 0)
    problems = task.problems(num_problems, split, start=start)
    key = jax.random.PRNGKey(seed)
    num_correct, rewards, lengths, stopped, turns = [], [], [], [], []
    reasons: Counter[str] = Counter()
    example = None
    for lo in range(0, num_problems, prompts_per_batch):
        chunk = problems[lo : lo + prompts_per_batch]
        ep = run_episodes(
            sampler,
            tokenizer,
            chunk,
            env_factory,
            params,
            jax.random.fold_in(key, lo),
            max_turns=max_turns,
        )
        correct = np.zeros(len(chunk), np.int64)
        for b, result in enumerate(ep.results):
            reason = result.info["reason"]
            reasons[reason] += 1
            correct[ep.problem_index[b]] += reason == CORRECT
            if example is None:
                example = dict(prompt=chunk[0].prompt, turns=ep.turns[b], reason=reason)
        num_correct += correct.tolist()
        rewards += ep.rewards.tolist()
        lengths += ep.rollout.response_mask.sum(axis=1).tolist()
        stopped += ep.rollout.stopped.tolist()
        turns += ep.num_turns.tolist()
    out = summarize_samples(
        n_samples, temperature, rewards, reasons, num_correct, lengths, stopped, example
    )
    out["mean_turns"] = float(np.mean(turns))
    # The task statistics every evaluation reports (the RL trainer logs them): an
    # episode's is its model turns (a task's group_metrics read single replies).
    out["task_metrics"] = {"mean_turns": out["mean_turns"]}
    return out
