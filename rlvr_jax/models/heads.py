"""Value heads on the trunk's final hidden states (critics for GAE / CBPO values).

Both heads read `model.forward(ids, mask, return_hidden=True).hidden` [B, T, D]
(after the final norm) and compute in float32 whatever the trunk's dtype: value
targets are regressed to small tolerances and bfloat16 would round them.

`CategoricalValueHead` follows the HL-Gauss convention (Imani & White 2018;
Farebrother et al. 2024): M bins with edges linspace(v_min, v_max, M + 1) and
centres at the edge midpoints. The value is the expectation of the centres
under softmax(logits), so it always lies in [centres[0], centres[-1]], strictly
inside [v_min, v_max].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

# Small init: a fresh critic predicts ~0 (scalar) or ~the support's midpoint
# (categorical, near-uniform logits) instead of noise scaled by the hidden norm.
_INIT_STD = 1e-3


def _dense_params(d_in: int, d_out: int, param_dtype, rngs: nnx.Rngs):
    kernel = jax.random.normal(rngs.params(), (d_in, d_out), param_dtype) * _INIT_STD
    return nnx.Param(kernel.astype(param_dtype)), nnx.Param(jnp.zeros((d_out,), param_dtype))


def _affine(hidden, kernel, bias):
    h32 = hidden.astype(jnp.float32)
    return h32 @ kernel[...].astype(jnp.float32) + bias[...].astype(jnp.float32)


class ScalarValueHead(nnx.Module):
    """v = hidden @ w + b: one scalar value per position."""

    def __init__(self, hidden_size: int, *, param_dtype=jnp.float32, rngs: nnx.Rngs):
        self.kernel, self.bias = _dense_params(hidden_size, 1, param_dtype, rngs)

    def __call__(self, hidden_BxTxD):
        """Values of every position.

        Args:
          hidden_BxTxD: final hidden states (any float dtype).
        Returns:
          values_BxT in float32.
        """
        return _affine(hidden_BxTxD, self.kernel, self.bias)[..., 0]


class CategoricalValueHead(nnx.Module):
    """Logits over M fixed value bins; the value is the softmax-expectation of the bin centres."""

    def __init__(
        self,
        hidden_size: int,
        *,
        num_bins: int,
        v_min: float,
        v_max: float,
        param_dtype=jnp.float32,
        rngs: nnx.Rngs,
    ):
        # Validates before any parameter is allocated.
        self.support(num_bins, v_min, v_max)
        # Static Python numbers, not arrays: the support is a constant of the
        # architecture, never trained, and keeps the graphdef hashable for jit.
        self.num_bins, self.v_min, self.v_max = int(num_bins), float(v_min), float(v_max)
        self.kernel, self.bias = _dense_params(hidden_size, self.num_bins, param_dtype, rngs)

    @staticmethod
    def support(num_bins: int, v_min: float, v_max: float) -> tuple[np.ndarray, np.ndarray]:
        """The HL-Gauss support: bin edges and centres.

        Args:
          num_bins: M >= 2.
          v_min, v_max: the value range, v_min < v_max.
        Returns:
          (edges [M + 1], centres [M]), float32 NumPy arrays; edges are
          linspace(v_min, v_max, M + 1), centres their midpoints, bin width
          (v_max - v_min) / M.
        """
        if int(num_bins) != num_bins or num_bins < 2:
            raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}")
        if not (np.isfinite(v_min) and np.isfinite(v_max) and v_min < v_max):
            raise ValueError(f"need finite v_min < v_max, got v_min={v_min}, v_max={v_max}")
        # float64 on the host, then float32, so centres are exact to f32 rounding.
        edges = np.linspace(float(v_min), float(v_max), int(num_bins) + 1, dtype=np.float64)
        centers = 0.5 * (edges[:-1] + edges[1:])
        return edges.astype(np.float32), centers.astype(np.float32)

    @property
    def edges(self) -> np.ndarray:
        """Bin edges [M + 1], float32."""
        return self.support(self.num_bins, self.v_min, self.v_max)[0]

    @property
    def centers(self) -> np.ndarray:
        """Bin centres [M], float32."""
        return self.support(self.num_bins, self.v_min, self.v_max)[1]

    @property
    def bin_width(self) -> float:
        return (self.v_max - self.v_min) / self.num_bins

    def __call__(self, hidden_BxTxD):
        """Bin logits of every position.

        Args:
          hidden_BxTxD: final hidden states (any float dtype).
        Returns:
          logits_BxTxM in float32.
        """
        return _affine(hidden_BxTxD, self.kernel, self.bias)

    def values(self, logits_BxTxM):
        """Expected value under softmax(logits) over the bin centres.

        Args:
          logits_BxTxM: bin logits (any leading shape).
        Returns:
          values_BxT in float32, within [centres[0], centres[-1]].
        """
        probs = jax.nn.softmax(logits_BxTxM.astype(jnp.float32), axis=-1)
        # Offsets from the midpoint: sum(probs) is 1 only to f32 rounding, and that
        # error times |centres| (not times the bin range) could leave [v_min, v_max].
        mid = 0.5 * (self.v_min + self.v_max)
        return mid + probs @ jnp.asarray(self.centers - np.float32(mid))
