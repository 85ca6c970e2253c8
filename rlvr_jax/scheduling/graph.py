"""Graph-structured online difficulty estimation: kNN graph, Potts prior, mean-field VI.

Model (the `graph_difficulty` paper fixes the structure; constants are ours):
  * a symmetric kNN graph over prompt embeddings, edge weights w_ij = max(cos, 0)
    (ours: cosine similarity of the given embeddings; the paper combines
    semantic and reasoning similarity);
  * latent difficulty states z_i ∈ {1..K} with a Potts prior
    p(z) ∝ Π_i π_{z_i} · exp(J Σ_{i<j} w_ij [z_i = z_j]);
  * state-level Beta-Binomial: θ_k ~ Beta(a0_k, b0_k), and prompt i's s_i
    successes / f_i failures ~ Binomial(θ_{z_i}) (ours: counts decay by λ per
    step so stale feedback fades);
  * mean-field q(z, θ) = Π_i q_i(z_i) Π_k Beta(θ_k; a_k, b_k), updated online
    by exact coordinate ascent (CAVI): each node update and each state update
    maximises the ELBO in its block, so the ELBO never decreases (tested).

Node updates run sequentially (`lax.fori_loop`): a synchronous (Jacobi) update
of neighbouring Potts nodes can oscillate and lower the ELBO.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betaln, digamma


def nearest_neighbours(emb_NxE: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """[N, k] int32: each row's k most cosine-similar other rows, most similar first.

    Ties are broken by the lower index (the order of a stable sort on −cos).
    Memory is O(chunk · N) and time O(N² · E) for the similarities plus O(N²)
    selection: a partition finds each row's k-th largest similarity, and only
    the entries at or above it are sorted (a row with ties at the boundary is
    sorted in full).

    Args:
      emb_NxE: embeddings (any float dtype).
      k: neighbours per row, 1 <= k < N.
      chunk: rows of the similarity matrix computed at a time.
    """
    n = emb_NxE.shape[0]
    if not 0 < k < n:
        raise ValueError(f"nearest_neighbours: k must be in [1, {n - 1}], got {k}")
    x = np.asarray(emb_NxE, np.float32)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    out = np.empty((n, k), np.int32)
    for lo in range(0, n, chunk):
        sim = x[lo : lo + chunk] @ x.T
        rows = np.arange(sim.shape[0])
        sim[rows, rows + lo] = -np.inf  # never one's own neighbour
        kth = -np.partition(-sim, k - 1, axis=1)[:, k - 1 : k]
        above = sim >= kth
        exact = above.sum(1) == k
        if exact.any():
            r, c = np.nonzero(above[exact])
            cand = c.reshape(-1, k)  # ascending index within each row
            s = sim[exact][r, c].reshape(-1, k)
            order = np.argsort(-s, axis=1, kind="stable")  # ties keep the lower index
            out[lo + rows[exact]] = np.take_along_axis(cand, order, 1)
        for i in rows[~exact]:  # ties at the boundary: the full stable sort
            out[lo + i] = np.argsort(-sim[i], kind="stable")[:k]
    return out


def knn_graph(emb_NxE: np.ndarray, k: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric kNN graph by cosine similarity, as padded neighbour lists.

    Args:
      emb_NxE: prompt embeddings.
      k: neighbours per prompt before symmetrisation (k < N).
      chunk: rows of the similarity matrix computed at a time.
    Returns:
      (nbr_NxD int32, w_NxD float32): neighbours of each node (the union of i's
      kNN and the nodes that have i among theirs), weights max(cos, 0); padding
      entries point at node 0 with weight 0. No self-loops.
    """
    n = emb_NxE.shape[0]
    if not 0 < k < n:
        raise ValueError(f"knn_graph: k must be in [1, {n - 1}], got {k}")
    x = emb_NxE / np.maximum(np.linalg.norm(emb_NxE, axis=1, keepdims=True), 1e-12)
    src = np.repeat(np.arange(n), k)
    # int64: the pair codes below reach N² (> 2³¹ from N = 46,341 prompts on).
    dst = nearest_neighbours(emb_NxE, k, chunk).ravel().astype(np.int64)
    pairs = np.unique(np.concatenate([src * n + dst, dst * n + src]))
    src, dst = pairs // n, pairs % n
    weight = np.maximum(np.einsum("ij,ij->i", x[src], x[dst]), 0.0)
    degree = np.bincount(src, minlength=n)
    slot = np.arange(len(src)) - np.repeat(np.cumsum(degree) - degree, degree)
    nbr = np.zeros((n, degree.max()), np.int32)
    w = np.zeros((n, degree.max()), np.float32)
    nbr[src, slot] = dst
    w[src, slot] = weight
    return nbr, w


def state_priors(num_states: int, strength: float) -> tuple[np.ndarray, np.ndarray]:
    """Beta priors of the K states with means (k + 0.5) / K and a0 + b0 = strength (ours)."""
    mean = (np.arange(num_states) + 0.5) / num_states
    return (strength * mean).astype(np.float32), (strength * (1 - mean)).astype(np.float32)


def _expected_logs(a_K, b_K):
    total = digamma(a_K + b_K)
    return digamma(a_K) - total, digamma(b_K) - total


@jax.jit
def update_nodes(q_NxK, nodes_M, nbr_NxD, w_NxD, s_N, f_N, a_K, b_K, coupling, log_prior_K):
    """Sequential CAVI updates of q(z_i) for the listed nodes (-1 entries are skipped).

    q_i ∝ π_k · exp(J Σ_j w_ij q_jk + s_i E[log θ_k] + f_i E[log(1 - θ_k)]).

    Returns:
      q_NxK after the updates.
    """
    el, el1 = _expected_logs(a_K, b_K)

    def body(t, q):
        i = nodes_M[t]
        ii = jnp.maximum(i, 0)
        field = coupling * jnp.sum(w_NxD[ii][:, None] * q[nbr_NxD[ii]], 0)
        new = jax.nn.softmax(log_prior_K + field + s_N[ii] * el + f_N[ii] * el1)
        return q.at[ii].set(jnp.where(i >= 0, new, q[ii]))

    return jax.lax.fori_loop(0, nodes_M.shape[0], body, q_NxK)


@jax.jit
def update_states(q_NxK, s_N, f_N, a0_K, b0_K):
    """CAVI update of q(θ_k) = Beta(a0_k + Σ_i q_ik s_i, b0_k + Σ_i q_ik f_i)."""
    return a0_K + q_NxK.T @ s_N, b0_K + q_NxK.T @ f_N


@jax.jit
def elbo(q_NxK, a_K, b_K, s_N, f_N, nbr_NxD, w_NxD, coupling, log_prior_K, a0_K, b0_K):
    """Evidence lower bound of the mean-field posterior (up to the constants log Z, binomials).

    Returns:
      scalar ELBO = E[log p(y|z,θ)] + E[log p(z)] + E[log p(θ)] + H[q(z)] + H[q(θ)].
    """
    el, el1 = _expected_logs(a_K, b_K)
    lik = jnp.sum(q_NxK * (s_N[:, None] * el + f_N[:, None] * el1))
    pair = jnp.sum(w_NxD[..., None] * q_NxK[:, None, :] * q_NxK[nbr_NxD])
    prior_z = jnp.sum(q_NxK * log_prior_K) + 0.5 * coupling * pair
    entropy = -jnp.sum(jnp.where(q_NxK > 0, q_NxK * jnp.log(jnp.maximum(q_NxK, 1e-30)), 0.0))
    kl = (
        betaln(a0_K, b0_K)
        - betaln(a_K, b_K)
        + (a_K - a0_K) * digamma(a_K)
        + (b_K - b0_K) * digamma(b_K)
        + (a0_K - a_K + b0_K - b_K) * digamma(a_K + b_K)
    )
    return lik + prior_z + entropy - jnp.sum(kl)
