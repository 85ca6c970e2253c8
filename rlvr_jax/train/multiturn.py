"""SFT and evaluation on multi-turn episodes (a policy acting against an environment).

* `reference_segments(env, turns)`: replays reference model turns through an
  environment and interleaves its observations: [(text, is_model), ...].
* `encode_episode(tokenizer, prompt, segments)`: token ids in the chat layout of
  `rlvr_jax.rollout.multiturn` and a loss mask that covers the model turns and
  their end-of-turn tokens, never the prompt or the observations.
* `train_sft_encoded(model, tokenizer, encoded, ...)`: the SFT loop of
  `rlvr_jax.train.sft` on already encoded (ids, loss mask) examples.
* `evaluate_episodes(model, tokenizer, task, ...)`: pass@k with real episodes
  (`run_episodes`), in the format of `evaluate_task`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models.transformer import Transformer
from rlvr_jax.rollout.multiturn import Env, observation_ids, run_episodes
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT, Problem, Task
from rlvr_jax.tokenizers import Tokenizer
from rlvr_jax.train.evaluate import pass_at_k
from rlvr_jax.train.sft import (
    SFTResult,
    TrainState,
    encode_prompt,
    end_of_turn_id,
    make_optimizer,
    make_train_step,
    pad_batch,
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


def train_sft_encoded(
    model: Transformer,
    tokenizer: Tokenizer,
    encoded: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    log_every: int = 50,
    length_multiple: int = 8,
) -> SFTResult:
    """`train_sft` on encoded (ids_T, loss_mask_T) examples; trains `model` in place.

    Same optimizer (`make_optimizer`), step (`make_train_step`), padding and
    seeded epoch order as `train_sft`, so a run is deterministic for a seed.

    Args:
      model: the policy.
      tokenizer: gives the pad id.
      encoded: examples from `encode_episode` (or `encode_example`).
      steps, batch_size, lr, seed, log_every, length_multiple: as `train_sft`.
    Returns:
      SFTResult (no evals). Raises FloatingPointError on a non-finite loss.
    """
    if not encoded:
        raise ValueError("train_sft_encoded needs at least one example")
    length = -(-max(len(ids) for ids, _ in encoded) // length_multiple) * length_multiple
    if length > model.config.max_position_embeddings:
        raise ValueError(
            f"examples need {length} positions; the model has "
            f"{model.config.max_position_embeddings}"
        )
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    order = np.concatenate(
        [rng.permutation(len(encoded)) for _ in range(math.ceil(need / len(encoded)))]
    )[:need].reshape(steps, batch_size)

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = jax.tree.map(jnp.copy, params)  # the step donates its input
    optimizer = make_optimizer(lr, steps)
    train_step = make_train_step(graphdef, optimizer)
    state = TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32))
    history, window, tokens = [], [], 0.0
    start = last = time.perf_counter()
    pending = None
    for i in range(steps + 1):
        if i < steps:
            batch = pad_batch([encoded[j] for j in order[i]], length, pad_id)
            state, metrics = train_step(state, rest, batch)
        if pending is not None:  # read step i-1 only after step i is dispatched
            step_num, m = pending[0], {k: float(v) for k, v in jax.device_get(pending[1]).items()}
            if not math.isfinite(m["loss"]):
                raise FloatingPointError(f"SFT loss is {m['loss']} at step {step_num}")
            window.append(m["loss"])
            tokens += m["num_tokens"]
            if step_num % log_every == 0 or step_num == steps:
                now = time.perf_counter()
                entry = dict(
                    step=step_num,
                    loss=float(np.mean(window)),
                    grad_norm=m["grad_norm"],
                    tokens_per_s=tokens / max(now - last, 1e-9),
                    seconds=now - start,
                )
                history.append(entry)
                log.info("sft step %d loss %.4f", step_num, entry["loss"])
                window.clear()
                last, tokens = now, 0.0
        pending = (i + 1, metrics) if i < steps else None
    nnx.update(model, state.params)
    return SFTResult(history, [], time.perf_counter() - start, history[-1]["loss"])


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
      "mean_turns".
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
    out = {
        "num_problems": num_problems,
        "n_samples": n_samples,
        "temperature": temperature,
        "mean_reward": float(np.mean(rewards)),
        "reasons": dict(sorted(reasons.items())),
        "num_correct": num_correct,
        "mean_response_tokens": float(np.mean(lengths)),
        "stopped_fraction": float(np.mean(stopped)),
        "mean_turns": float(np.mean(turns)),
        "example": example,
    }
    for k in sorted({1, n_samples}):
        out[f"pass@{k}"] = float(np.mean(pass_at_k(n_samples, np.asarray(num_correct), k)))
    return out
