"""ISO-Merger: shared-base specialists' frame changes combined into one fixed-spectrum model.

For every reparametrised matrix (ISO's `include` regex) with base W₀ = U₀ diag(s₀) V₀ᵀ
and specialists W_k (thin SVD U_k diag(s_k) V_kᵀ, singular pairs sign-aligned to the
base's), the merge keeps the base spectrum and adds the frame changes:

  U = R(U₀ + Σ_k λ_k (U_k − U₀)),  V = R(V₀ + Σ_k λ_k (V_k − V₀)),  W = U diag(s₀) Vᵀ

with R the retraction. A specialist trained with ISO has s_k = s₀, so its SVD returns
exactly its frames (up to the signs the alignment fixes); one trained without ISO
contributes the frames of its SVD and its spectrum change is dropped. Every other
parameter is merged as task vectors, W₀ + Σ_k λ_k (W_k − W₀). No data, rollouts or
gradients are used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jax.numpy as jnp

from rlvr_jax.optim.iso import DEFAULT_INCLUDE, flatten, retract, svd_frames, unflatten_like

# `include` for flat {Hugging Face tensor name: array} dicts (model.safetensors names; the
# [out, in] layout only swaps U and V, which the merge treats alike).
HF_INCLUDE = r"\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"


_NOTHING = r"(?!)"  # a regex that matches no path


def aligned_frames(w_MxN, u0_MxR, vt0_RxN):
    """The thin SVD of `w_MxN` with each singular pair's sign chosen to face the base's.

    A pair (u_i, v_i) and (−u_i, −v_i) give the same W; the one with
    u_i·u0_i + v_i·v0_i ≥ 0 is kept, so frame differences measure rotation, not sign.

    Returns:
      (U [M, R], s [R], Vᵀ [R, N]) in float32.
    """
    u, s, vt = svd_frames(w_MxN)
    sign = jnp.where(jnp.sum(u * u0_MxR, 0) + jnp.sum(vt * vt0_RxN, 1) < 0, -1.0, 1.0)
    return u * sign[None, :], s, vt * sign[:, None]


def iso_merge(
    base,
    specialists: Sequence,
    lambdas: Sequence[float],
    *,
    include: str = DEFAULT_INCLUDE,
    retraction: str = "polar",
):
    """ISO-Merger of `specialists` (param trees of `base`'s structure) with weights λ.

    Args:
      base: the shared base's params (nnx.State or nested dicts of arrays).
      specialists: K param trees fine-tuned from `base`.
      lambdas: K weights λ_k (1 / K averages the frame changes; (1, 0, ...) keeps
        the first specialist's frames).
      include: regex of the matrices merged by frames (ISO's default: attention
        and MLP projections); the rest are merged as task vectors.
      retraction: "polar" (the nearest orthonormal frames) or "qr".
    Returns:
      A param tree of `base`'s structure and dtypes whose `include` matrices have
      exactly the base's singular values.
    """
    if len(specialists) != len(lambdas) or not specialists:
        raise ValueError(
            f"{len(specialists)} specialists and {len(lambdas)} lambdas; need K ≥ 1 of each"
        )
    pattern = re.compile(include)
    flat0 = flatten(base)
    flats = [flatten(t) for t in specialists]
    for k, f in enumerate(flats):
        if set(f) != set(flat0):
            diff = sorted(set(f) ^ set(flat0))[:4]
            raise ValueError(
                f"specialist {k} does not have the base's parameters (differs at {diff})"
            )
    out = {}
    for path, w0 in flat0.items():
        ws = [f[path] for f in flats]
        if jnp.ndim(w0) == 2 and pattern.search(path):
            u0, s0, vt0 = svd_frames(w0)
            u, vt = u0, vt0
            for lam, w in zip(lambdas, ws, strict=True):
                uk, _, vtk = aligned_frames(w, u0, vt0)
                u, vt = u + lam * (uk - u0), vt + lam * (vtk - vt0)
            u, vt = retract(u, retraction), retract(vt.T, retraction).T
            merged = (u * s0[None, :]) @ vt
        else:
            merged = task_vectors(w0, ws, lambdas)
        out[path] = merged.astype(w0.dtype)
    return unflatten_like(base, out)


def task_vectors(w0, ws: Sequence, lambdas: Sequence[float]):
    """W₀ + Σ_k λ_k (W_k − W₀) in float32 (task arithmetic on one tensor)."""
    w0 = jnp.asarray(w0, jnp.float32)
    merged = w0
    for lam, w in zip(lambdas, ws, strict=True):
        merged = merged + lam * (jnp.asarray(w, jnp.float32) - w0)
    return merged


def task_vector_merge(base, specialists: Sequence, lambdas: Sequence[float]):
    """Task arithmetic on every parameter: the comparison row of ISO-Merger.

    Returns:
      A param tree of `base`'s structure and dtypes.
    """
    return iso_merge(base, specialists, lambdas, include=_NOTHING)
