"""Late-layer interpolation: a block of the RL policy's layers pulled toward an early checkpoint.

θ(α) = θ_RL, except every parameter of the layers in `layers`, which becomes
(1 − α)·θ_RL + α·θ_early. α = 0 is θ_RL, α = 1 puts the early checkpoint's block
into the RL model (both exactly). "Locked at the Entrance" reports that for the
late layers this raises solution coverage by 37% at no pass@1 loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from rlvr_jax.optim.iso import param_path

_LAYER = re.compile(r"(^|/)layers/(\d+)/")


def layer_of(path: str) -> int | None:
    """The block index of a parameter path ("layers/3/mlp/up_proj/kernel" -> 3), or None."""
    m = _LAYER.search(path)
    return int(m.group(2)) if m else None


def layer_block(num_layers: int, start: int, stop: int | None = None) -> list[int]:
    """The layer indices range(start, stop) of a `num_layers` model, negatives from the end.

    Args:
      num_layers: the model's layer count.
      start, stop: Python slice bounds (stop None = to the last layer).
    Returns:
      The sorted indices; ValueError when the block is empty.
    """
    block = list(range(num_layers))[slice(start, stop)]
    if not block:
        raise ValueError(f"layers {start}:{stop} select no layer of a {num_layers}-layer model")
    return block


def interpolate_layers(theta_rl, theta_early, alpha: float, layers: Sequence[int]):
    """θ_RL with the block `layers` replaced by (1 − α)·θ_RL + α·θ_early.

    Args:
      theta_rl, theta_early: param trees of one structure (nnx.State or dicts).
      alpha: α in [0, 1].
      layers: block indices to interpolate; other parameters (embeddings, the
        final norm, the other layers) stay θ_RL's.
    Returns:
      A param tree of θ_RL's structure and dtypes.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    chosen = set(layers)
    if jax.tree.structure(theta_rl) != jax.tree.structure(theta_early):
        raise ValueError("the RL and early checkpoints have different parameter structures")

    def one(path, a, b):
        if layer_of(param_path(path)) not in chosen:
            return a
        mixed = (1.0 - alpha) * jnp.asarray(a, jnp.float32) + alpha * jnp.asarray(b, jnp.float32)
        return mixed.astype(a.dtype)

    return jax.tree_util.tree_map_with_path(one, theta_rl, theta_early)
