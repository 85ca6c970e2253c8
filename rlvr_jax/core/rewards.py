"""Sequence-reward shaping kernels: DAPO's soft overlong penalty.

Pure and jit-able; they add to the verifier's rewards before the advantage
estimator runs.
"""

from __future__ import annotations

import jax.numpy as jnp


def soft_overlong_penalty(lengths_B, *, max_len: int, cache_len: int, penalty=1.0):
    """DAPO's soft overlong punishment R_length(y), to add to the reward.

    With L_max = `max_len` (the generation budget) and L_cache = `cache_len`:
      0                                     if |y| ≤ L_max − L_cache
      ((L_max − L_cache) − |y|) / L_cache   if L_max − L_cache < |y| ≤ L_max
      −1                                    if |y| > L_max
    times `penalty` (DAPO: 1). The penalty ramps linearly from 0 to −1 over the
    last L_cache tokens of the budget.

    Args:
      lengths_B: [B] response lengths |y| (sampled tokens), int or float.
      max_len: L_max > 0.
      cache_len: L_cache, 0 < L_cache ≤ L_max.
      penalty: scale of the penalty (≥ 0).
    Returns:
      [B] float32 rewards in [−penalty, 0].
    Raises:
      ValueError: invalid max_len / cache_len.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got {cache_len=} {max_len=}")
    length = jnp.asarray(lengths_B, jnp.float32)
    start = float(max_len - cache_len)
    ramp = (start - length) / float(cache_len)
    out = jnp.where(length <= start, 0.0, jnp.where(length <= max_len, ramp, -1.0))
    return out * jnp.asarray(penalty, jnp.float32)
