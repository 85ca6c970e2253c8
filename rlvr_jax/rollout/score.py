"""The score step shared by training, scheduling and evaluation: cut → decode → verify.

`score_rows` is the one place a sampled response becomes a verdict: the tokens
up to the first stop id are decoded and handed to `task.verify_batch` (one call
per batch, so the code tasks run every program in one sandbox-pool call). The RL rollout
plug-ins, the select stage's schedulers and `train.evaluate` all call it, so a
test can substitute the verifier in one place (`rlvr_jax.testing.parity_score_rows`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from rlvr_jax.core.rewards import soft_overlong_penalty
from rlvr_jax.tasks.base import CORRECT, Problem, Task
from rlvr_jax.tokenizers import Tokenizer, cut_at_stop


@dataclasses.dataclass(frozen=True)
class Verdicts:
    """The verifier's verdicts on R responses.

    Attributes:
      rewards: [R] float64 verifier rewards (exactly as the task returned them).
      correct: [R] bool, the verdict is CORRECT.
      reasons: R verifier reasons.
      texts: R decoded responses (cut at the first stop token).
    """

    rewards: np.ndarray
    correct: np.ndarray
    reasons: list[str]
    texts: list[str]


def score_rows(
    task: Task,
    tokenizer: Tokenizer,
    problems_R: Sequence[Problem],
    sampled_R: Sequence[Sequence[int]],
    stop_ids: Sequence[int],
) -> Verdicts:
    """Verifies R responses.

    Args:
      task: the verifier.
      tokenizer: decodes the responses.
      problems_R: the problem each response answers.
      sampled_R: each response's sampled token ids (stop token included, if any).
      stop_ids: a response is cut before the first of these.
    Returns:
      Verdicts.
    """
    texts = [tokenizer.decode(cut_at_stop(ids, stop_ids)) for ids in sampled_R]
    if len(texts) != len(problems_R):
        raise ValueError(f"{len(problems_R)} problems for {len(texts)} responses")
    verdicts = task.verify_batch(list(problems_R), texts)  # the code tasks: one sandbox call
    rewards = [v.reward for v in verdicts]
    correct = [v.reason == CORRECT for v in verdicts]
    reasons = [v.reason for v in verdicts]
    return Verdicts(np.asarray(rewards, np.float64), np.asarray(correct, bool), reasons, texts)


def overlong_shaping(
    rewards_R: np.ndarray, lengths_R: np.ndarray, *, max_len: int, cache: int, penalty: float
) -> np.ndarray:
    """DAPO's soft overlong penalty added to the rewards (cache = L_cache; 0 = off).

    Args:
      rewards_R: [R] float32 verifier rewards.
      lengths_R: [R] sampled tokens per response.
      max_len: L_max, the generation budget.
      cache: L_cache, the penalty window before L_max.
      penalty: the penalty's scale.
    Returns:
      [R] float32 shaped rewards.
    """
    if not cache:
        return rewards_R
    shaped = soft_overlong_penalty(lengths_R, max_len=max_len, cache_len=cache, penalty=penalty)
    return rewards_R + np.asarray(shaped)
