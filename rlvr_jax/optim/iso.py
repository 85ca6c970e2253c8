"""Isospectral optimization (ISO): a base optimizer moves the singular frames, the spectrum stays.

Each chosen weight matrix W [m, n] is reparametrised by its thin SVD at
`init`, W = U diag(s) Vᵀ with U [m, r], Vᵀ [r, n], r = min(m, n), and s is
frozen. Every update:

  1. the gradient G = ∂L/∂W is pulled back to the frames,
       ∂L/∂U = G V diag(s)    [m, r]        ∂L/∂Vᵀ = diag(s) Uᵀ G    [r, n]
  2. the base optimizer (AdamW, Muon, ...) turns them into steps ΔU, ΔVᵀ,
  3. a retraction maps U + ΔU (and V + ΔV) back to orthonormal columns:
       "qr":    the Q factor with diag(R) > 0 (so a zero step keeps U exactly),
       "polar": the nearest orthonormal matrix P Qᵀ of the SVD P Σ Qᵀ,
  4. the emitted update is U' diag(s) V'ᵀ − W, so `optax.apply_updates` leaves
     the parameter at the new point (its error is one rounding, never accumulated).

Parameters that are not chosen (norms, embeddings, ...) go through the base
optimizer unchanged. The frames live in the optimizer state keyed by the
parameter's path ("layers/0/mlp/up_proj/kernel"), so `rlvr_jax.sharding`
shards U like W's rows and Vᵀ like W's columns (their paths end like W's).
The spectrum is the one of the first `init`: it is exactly the weights' at step 0.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

RETRACTIONS = ("qr", "polar")
# The attention and MLP projections of every layer (embeddings, norms and heads stay
# Euclidean: the paper reparametrises the transformer's weight matrices).
DEFAULT_INCLUDE = r"(^|/)(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)/kernel$"


def param_path(keypath) -> str:
    """ "layers/0/mlp/up_proj/kernel" for a tree_flatten_with_path key path (nnx's trailing
    "value" dropped)."""
    return jax.tree_util.keystr(keypath, simple=True, separator="/").removesuffix("/value")


def flatten(tree) -> dict[str, Any]:
    """path -> leaf of a params-like tree (see `param_path`)."""
    return {param_path(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def unflatten_like(tree, flat: dict[str, Any]):
    """`tree` with every leaf replaced by `flat[its path]`."""
    return jax.tree_util.tree_map_with_path(lambda p, _: flat[param_path(p)], tree)


def chosen_paths(tree, include: str = DEFAULT_INCLUDE) -> list[str]:
    """Paths of the 2-D leaves whose path matches the regex `include`."""
    pattern = re.compile(include)
    return [p for p, x in flatten(tree).items() if jnp.ndim(x) == 2 and pattern.search(p)]


def retract(x_MxR, method: str = "qr"):
    """The orthonormal-column matrix of a retraction at `x_MxR` (M ≥ R).

    Args:
      x_MxR: [M, R] float matrix of full column rank.
      method: "qr" (Q factor, signs fixed so diag(R) > 0) or "polar" (P Qᵀ of its SVD).
    Returns:
      [M, R] float32 with orthonormal columns; `x_MxR` itself (to rounding) when
      its columns are already orthonormal.
    """
    x = jnp.asarray(x_MxR, jnp.float32)
    if method == "qr":
        q, r = jnp.linalg.qr(x, mode="reduced")
        sign = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0)
        return q * sign[None, :]
    if method == "polar":
        p, _, qt = jnp.linalg.svd(x, full_matrices=False)
        return p @ qt
    raise ValueError(f"unknown retraction {method!r}; valid: {', '.join(RETRACTIONS)}")


def svd_frames(w_MxN):
    """Thin SVD in float32: (U [M, R], s [R] descending, Vᵀ [R, N]), R = min(M, N)."""
    return jnp.linalg.svd(jnp.asarray(w_MxN, jnp.float32), full_matrices=False)


class IsoState(NamedTuple):
    """ISO's optimizer state: per chosen path its frames and fixed spectrum, and the base's state.

    Attributes:
      u: path -> U [m, r]; vt: path -> Vᵀ [r, n]; s: path -> s [r] (never updated).
      inner: the base optimizer's state over {"u": u, "vt": vt, "rest": other params}.
    """

    u: dict[str, jax.Array]
    vt: dict[str, jax.Array]
    s: dict[str, jax.Array]
    inner: Any


def frame_grads(g_MxN, u_MxR, s_R, vt_RxN):
    """(∂L/∂U, ∂L/∂Vᵀ) of W = U diag(s) Vᵀ from G = ∂L/∂W, in float32."""
    g = jnp.asarray(g_MxN, jnp.float32)
    return g @ (vt_RxN.T * s_R[None, :]), s_R[:, None] * (u_MxR.T @ g)


def iso(
    base: optax.GradientTransformation,
    *,
    include: str = DEFAULT_INCLUDE,
    retraction: str = "qr",
) -> optax.GradientTransformation:
    """ISO around `base`: fixed spectra, frames stepped by `base` then retracted.

    Args:
      base: the optimizer of the frames and of the other params. It sees the tree
        {"u": {path: U}, "vt": {path: Vᵀ}, "rest": {path: W}} (gradients and
        params alike); a weight-decay mask should leave "u" and "vt" out.
      include: regex on parameter paths; matching 2-D params get frames.
      retraction: one of RETRACTIONS.
    Returns:
      An optax GradientTransformation whose `update` needs `params`.
    """
    if retraction not in RETRACTIONS:
        raise ValueError(f"unknown retraction {retraction!r}; valid: {', '.join(RETRACTIONS)}")
    re.compile(include)

    def init(params):
        flat, chosen = flatten(params), set(chosen_paths(params, include))
        if not chosen:
            raise ValueError(f"iso: no 2-D parameter path matches include={include!r}")
        u, vt, s = {}, {}, {}
        for p in sorted(chosen):
            u[p], s[p], vt[p] = svd_frames(flat[p])
        rest = {p: x for p, x in flat.items() if p not in chosen}
        return IsoState(u, vt, s, base.init({"u": u, "vt": vt, "rest": rest}))

    def update(grads, state, params=None):
        if params is None:
            raise ValueError("iso needs params in update(grads, state, params)")
        g, w = flatten(grads), flatten(params)
        gu, gvt = {}, {}
        for p in state.u:
            gu[p], gvt[p] = frame_grads(g[p], state.u[p], state.s[p], state.vt[p])
        rest_g = {p: x for p, x in g.items() if p not in state.u}
        rest_w = {p: w[p] for p in rest_g}
        steps, inner = base.update(
            {"u": gu, "vt": gvt, "rest": rest_g},
            state.inner,
            {"u": state.u, "vt": state.vt, "rest": rest_w},
        )
        u = {p: retract(state.u[p] + steps["u"][p], retraction) for p in state.u}
        vt = {p: retract((state.vt[p] + steps["vt"][p]).T, retraction).T for p in state.vt}
        out = dict(steps["rest"])
        for p in state.u:
            new_w = (u[p] * state.s[p][None, :]) @ vt[p]
            out[p] = (new_w - w[p].astype(jnp.float32)).astype(w[p].dtype)
        return unflatten_like(grads, out), IsoState(u, vt, state.s, inner)

    return optax.GradientTransformation(init, update)


def iso_decay_mask(tree) -> dict:
    """A weight-decay mask for ISO's base: matrices of "rest" only (never the frames)."""
    return {
        "u": jax.tree.map(lambda _: False, tree["u"]),
        "vt": jax.tree.map(lambda _: False, tree["vt"]),
        "rest": jax.tree.map(lambda x: jnp.ndim(x) >= 2, tree["rest"]),
    }


def spectrum_drift(before, after, include: str = DEFAULT_INCLUDE) -> float:
    """Largest change of a singular value between two param trees, relative to the top one.

    Args:
      before, after: param trees of one structure.
      include: regex of the matrices compared (ISO's).
    Returns:
      max over the `include` matrices of max_i |s_i(after) − s_i(before)| / s_1(before):
      ~1e-7 after ISO training, the size of the spectral change after plain training.
    """
    f0, f1 = flatten(before), flatten(after)
    drift = 0.0
    for path in chosen_paths(before, include):
        s0 = jnp.linalg.svd(jnp.asarray(f0[path], jnp.float32), compute_uv=False)
        s1 = jnp.linalg.svd(jnp.asarray(f1[path], jnp.float32), compute_uv=False)
        drift = max(drift, float(jnp.max(jnp.abs(s1 - s0)) / s0[0]))
    return drift
