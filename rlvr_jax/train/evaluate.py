"""Evaluation of a policy on a verifiable task: the unbiased pass@k and sampled rewards.

`evaluate_task` renders each problem's prompt with the tokenizer's chat
template, samples `n_samples` responses per prompt with the `Sampler` and
scores them as training does (`rollout.score.score_rows`: cut at the first stop
token, decode, `task.verify`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.rollout import score
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import Task
from rlvr_jax.tokenizers import Tokenizer, encode_prompt


def _pass_at_k_one(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(
            f"need 0 <= num_correct <= num_samples and 1 <= k <= n; got {n=} {c=} {k=}"
        )
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i): no huge binomials.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k(num_samples, num_correct, k: int):
    """Unbiased pass@k estimator 1 - C(n-c, k) / C(n, k) (Chen et al., 2021).

    Computed as a product of ratios, so it is stable for any n.

    Args:
      num_samples: n, samples drawn per problem (int or array of ints).
      num_correct: c, how many of them were correct (same shape as n).
      k: the k of pass@k, 1 <= k <= n.
    Returns:
      float (or float64 array of num_correct's shape): the probability that at
      least one of k samples drawn without replacement from the n is correct.
    """
    n_arr, c_arr = np.broadcast_arrays(np.asarray(num_samples), np.asarray(num_correct))
    out = np.array(
        [
            _pass_at_k_one(int(n), int(c), k)
            for n, c in zip(n_arr.ravel(), c_arr.ravel(), strict=True)
        ],
        np.float64,
    ).reshape(n_arr.shape)
    return float(out) if out.ndim == 0 else out


def evaluate_task(
    model: Transformer,
    tokenizer: Tokenizer,
    task: Task,
    *,
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
    """Samples and verifies `n_samples` responses for each of `num_problems` problems.

    Args:
      model: the policy.
      tokenizer: renders prompts (chat template), gives stop ids, decodes responses.
      task: a verifiable task; problems are `task.problem(start + i, split)`.
      split: problem split.
      num_problems: how many problems.
      n_samples: n, responses per problem (pass@k is reported for k = 1 and n).
      temperature: sampling temperature (0 = greedy).
      max_new_tokens: decode budget per response (a response cut off by it is
        scored as written).
      seed: PRNG seed; the same seed gives the same samples.
      prompts_per_batch: prompts sampled together (rows = this * n_samples).
      start: index of the first problem.
      split_processes: in a multi-process run, each process samples only its share
        of the problems (`distributed.process_shard`) and the per-problem results of all
        processes are gathered (`distributed.allgather_objects`), so every process
        returns the result over all problems. (A collective; without it every
        process samples every problem.)
      sampler: `Sampler` options (`train.eval_checkpoint.eval_sampler`: the paged
        engine's); None: the static sampler.
    Returns:
      dict with "pass@1" and f"pass@{n}" (means of the unbiased estimator over
      problems), "mean_reward", "reasons" (reason -> count over all samples),
      "num_correct" (per problem), "num_problems", "n_samples",
      "mean_response_tokens" and "stopped_fraction" (responses that ended with a
      stop token), "task_metrics" (the task's `group_metrics` averaged over
      problems, e.g. Countdown's coverage and entrance entropy), plus one example
      response in "example".
    """
    stop_ids = tokenizer.stop_ids
    params = SamplingParams(
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        stop_token_ids=stop_ids,
        n=n_samples,
    )
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model, pad_id=pad_id, **dict(sampler or {}))
    problems = task.problems(num_problems, split, start=start)
    key = jax.random.PRNGKey(seed)
    mine = distributed.my_shard(num_problems, split_processes)
    records = []  # per entry of `mine`: its samples' results
    for lo in range(0, len(mine), prompts_per_batch):
        ids = mine[lo : lo + prompts_per_batch]
        chunk = [problems[i] for i in ids]
        prompts = [encode_prompt(tokenizer, p.prompt) for p in chunk]
        rollout = sampler.sample(prompts, params, jax.random.fold_in(key, lo))
        rows = range(len(chunk) * n_samples)
        v = score.score_rows(
            task,
            tokenizer,
            [chunk[b // n_samples] for b in rows],
            [rollout.sampled_tokens(b) for b in rows],
            stop_ids,
        )
        lengths = rollout.response_mask.sum(-1).astype(int)
        stopped = np.asarray(rollout.stopped, bool)
        for g, problem in enumerate(chunk):
            s = slice(g * n_samples, (g + 1) * n_samples)
            records.append(dict(
                rewards=v.rewards[s].tolist(), reasons=list(v.reasons[s]),
                lengths=lengths[s].tolist(), stopped=stopped[s].tolist(),
                correct=int(v.correct[s].sum()), texts=list(v.texts[s]),
                metrics=task.group_metrics(problem, v.texts[s]),
            ))  # fmt: skip
    ordered = distributed.gather_shards(mine, records, num_problems, split_processes)
    first = ordered[0]
    example = dict(
        prompt=problems[0].prompt, response=first["texts"][0], reason=first["reasons"][0]
    )
    out = summarize_samples(
        n_samples,
        temperature,
        [r for x in ordered for r in x["rewards"]],
        Counter(r for x in ordered for r in x["reasons"]),
        [x["correct"] for x in ordered],
        [n for x in ordered for n in x["lengths"]],
        [b for x in ordered for b in x["stopped"]],
        example,
    )
    num_correct, group_metrics = out["num_correct"], [x["metrics"] for x in ordered]
    out.update(domain_pass_at_k(problems, num_correct, n_samples))
    out["task_metrics"] = mean_group_metrics(group_metrics)
    return out


def domain_pass_at_k(problems, num_correct, n_samples: int) -> dict[str, float]:
    """{"pass@k/<domain>": mean pass@k} for k = 1 and n, over the problems of each domain.

    Only problems that name a domain in `metadata["domain"]` (the mixture task)
    count; an empty dict when none does.
    """
    domains = np.array([str(p.metadata.get("domain", "")) for p in problems])
    nc = np.asarray(num_correct)
    out = {}
    for d in sorted(set(domains) - {""}):
        for k in sorted({1, n_samples}):
            out[f"pass@{k}/{d}"] = float(np.mean(pass_at_k(n_samples, nc[domains == d], k)))
    return out


def mean_group_metrics(per_problem: list[dict[str, float]]) -> dict[str, float]:
    """Each `Task.group_metrics` statistic averaged over the problems (name -> mean)."""
    names = sorted({k for m in per_problem for k in m})
    return {k: float(np.mean([m[k] for m in per_problem if k in m])) for k in names}


def summarize_samples(
    n_samples, temperature, rewards, reasons, num_correct, lengths, stopped, example
):
    """The result dict of `evaluate_task` from per-sample and per-problem records.

    Args:
      n_samples: n, samples per problem.
      temperature: the sampling temperature (reported).
      rewards, lengths, stopped: one entry per sample.
      reasons: Counter of verifier reasons over all samples.
      num_correct: correct samples per problem.
      example: one example record (any dict) or None.
    Returns:
      The dict described in `evaluate_task`.
    """
    out = {
        "num_problems": len(num_correct),
        "n_samples": n_samples,
        "temperature": temperature,
        "mean_reward": float(np.mean(rewards)),
        "reasons": dict(sorted(reasons.items())),
        "num_correct": list(num_correct),
        "mean_response_tokens": float(np.mean(lengths)),
        "stopped_fraction": float(np.mean(stopped)),
        "example": example,
    }
    for k in sorted({1, n_samples}):
        out[f"pass@{k}"] = float(np.mean(pass_at_k(n_samples, np.asarray(num_correct), k)))
    return out
