"""Difficulty estimators: posteriors over each prompt's success rate, as Beta mixtures.

Both expose the same three pure functions so the selection and allocation
schedulers (difficulty prediction, SARA) can use either:

    est = estimator.init(pool)
    est = estimator.update(est, prompt_M, successes_M, trials_M)   # once per step
    alpha_NxK, beta_NxK, weight_NxK = estimator.mixture(est)

  beta   per-prompt Beta(α0 + s_i, β0 + f_i) with counts decayed by λ each step
         (K = 1). The decay is our choice (the baselines fix only "Beta posterior").
  graph  the graph_difficulty model (rlvr_jax.scheduling.graph): prompt i's
         posterior is Σ_k q_ik Beta(a_k, b_k), so unseen prompts inherit their
         neighbours' difficulty (no cold start) without probing.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from rlvr_jax.scheduling import graph
from rlvr_jax.scheduling.base import Pool, State, bucket_rows


def _decayed_counts(est: State, decay: float, prompt_M, successes_M, trials_M):
    s = est["succ"] * np.float32(decay)
    f = est["fail"] * np.float32(decay)
    np.add.at(s, prompt_M, np.asarray(successes_M, np.float32))
    np.add.at(f, prompt_M, np.asarray(trials_M, np.float32) - np.asarray(successes_M, np.float32))
    return s, f


def empirical_prior(pop, fallback_alpha: float, fallback_beta: float):
    """Method-of-moments Beta prior from group success fractions (empirical Bayes).

    Args:
      pop: [4] decayed sums over observed groups: weight, Σ p̂, Σ p̂², Σ 1/n.
      fallback_alpha, fallback_beta: returned before any group was seen.
    Returns:
      (α0, β0): mean = mean p̂; α0 + β0 = 1/ρ - 1 with ρ solving
      Var(p̂) = μ(1-μ)(ρ + (1-ρ)/n̄), clipped to [0.1, 100].
    """
    w, s1, s2, sinv = (float(x) for x in pop)
    if w < 1.0:
        return fallback_alpha, fallback_beta
    mu = float(np.clip(s1 / w, 1e-3, 1 - 1e-3))
    var = max(s2 / w - (s1 / w) ** 2, 0.0)
    inv_n = min(sinv / w, 0.999)
    rho = (var / (mu * (1 - mu)) - inv_n) / (1 - inv_n)
    strength = float(np.clip(1.0 / max(rho, 1e-6) - 1.0, 0.1, 100.0))
    return mu * strength, (1 - mu) * strength


@dataclasses.dataclass(frozen=True)
class BetaEstimator:
    """Per-prompt Beta posterior with decay.

    Attributes:
      prior_alpha, prior_beta: α0, β0 of a "fixed" prior (ours: 1, 1).
      decay: λ, evidence multiplier per step (ours: 0.9; 1 = no forgetting).
      prior: "empirical" (ours, default: α0, β0 fitted by moments to every
        observed group, so an unseen prompt gets the population's U-shaped
        prior instead of a flat one) or "fixed".
    """

    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    decay: float = 0.9
    prior: str = "empirical"

    def __post_init__(self):
        if self.prior not in ("empirical", "fixed"):
            raise ValueError(f"BetaEstimator.prior = {self.prior!r}; valid: empirical, fixed")

    def init(self, pool: Pool) -> State:
        z = np.zeros(pool.num_prompts, np.float32)
        return {"succ": z, "fail": z.copy(), "pop": np.zeros(4, np.float64)}

    def update(self, est: State, prompt_M, successes_M, trials_M) -> State:
        s, f = _decayed_counts(est, self.decay, prompt_M, successes_M, trials_M)
        n = np.asarray(trials_M, np.float64)
        keep = n >= 2
        frac = np.asarray(successes_M, np.float64)[keep] / n[keep]
        pop = est["pop"] * self.decay + np.array(
            [keep.sum(), frac.sum(), (frac**2).sum(), (1.0 / n[keep]).sum()]
        )
        return {"succ": s, "fail": f, "pop": pop}

    def mixture(self, est: State):
        a0, b0 = self.prior_alpha, self.prior_beta
        if self.prior == "empirical":
            a0, b0 = empirical_prior(est["pop"], a0, b0)
        one = np.ones((len(est["succ"]), 1), np.float32)
        return (
            (a0 + est["succ"])[:, None].astype(np.float32),
            (b0 + est["fail"])[:, None].astype(np.float32),
            one,
        )


@dataclasses.dataclass(frozen=True)
class GraphEstimator:
    """Graph-structured difficulty (kNN graph, Potts prior, state-level Beta-Binomial).

    Attributes:
      num_states: K latent difficulty states (ours: 4).
      neighbours: k of the kNN graph (ours: 10).
      coupling: Potts J (ours: 1.0).
      prior_strength: a0 + b0 of each state's Beta prior (ours: 2); state k's
        prior mean is (k + 0.5) / K and the prior over states is uniform.
      decay: λ on the per-prompt counts per step (ours: 0.9).
      sweeps: CAVI sweeps per update (ours: 2) over the touched nodes and their
        neighbours up to `hops` edges away (ours: 2).
    """

    num_states: int = 4
    neighbours: int = 10
    coupling: float = 1.0
    prior_strength: float = 2.0
    decay: float = 0.9
    sweeps: int = 2
    hops: int = 2

    def __post_init__(self):
        rules = {
            "num_states": (self.num_states >= 2, ">= 2"),
            "neighbours": (self.neighbours >= 1, ">= 1"),
            "coupling": (self.coupling >= 0, ">= 0"),
            "prior_strength": (self.prior_strength > 0, "> 0"),
            "decay": (0 < self.decay <= 1, "in (0, 1]"),
            "sweeps": (self.sweeps >= 1, ">= 1"),
            "hops": (self.hops >= 0, ">= 0"),
        }
        for name, (ok, rule) in rules.items():
            if not ok:
                raise ValueError(f"GraphEstimator.{name} = {getattr(self, name)!r}; must be {rule}")

    def _priors(self):
        a0, b0 = graph.state_priors(self.num_states, self.prior_strength)
        log_prior = np.full(self.num_states, -np.log(self.num_states), np.float32)
        return a0, b0, log_prior

    def init(self, pool: Pool) -> State:
        if pool.embeddings is None:
            raise ValueError("GraphEstimator needs Pool.embeddings [N, E]; got None")
        nbr, w = graph.knn_graph(np.asarray(pool.embeddings, np.float32), self.neighbours)
        a0, b0, _ = self._priors()
        n, k = pool.num_prompts, self.num_states
        z = np.zeros(n, np.float32)
        return {
            "nbr": nbr,
            "w": w,
            "q": np.full((n, k), 1.0 / k, np.float32),
            "a": a0.copy(),
            "b": b0.copy(),
            "succ": z,
            "fail": z.copy(),
        }

    def update(self, est: State, prompt_M, successes_M, trials_M) -> State:
        s, f = _decayed_counts(est, self.decay, prompt_M, successes_M, trials_M)
        a0, b0, log_prior = self._priors()
        nodes = np.unique(np.asarray(prompt_M))
        for _ in range(self.hops):
            nodes = np.unique(np.concatenate([nodes, est["nbr"][nodes].ravel()]))
        # A bucketed length keeps the number of compiled fori_loop shapes small.
        padded = np.full(bucket_rows(len(nodes), 64), -1, np.int32)
        padded[: len(nodes)] = nodes
        q, a, b = jnp.asarray(est["q"]), jnp.asarray(est["a"]), jnp.asarray(est["b"])
        for _ in range(self.sweeps):
            q = graph.update_nodes(
                q, padded, est["nbr"], est["w"], s, f, a, b, self.coupling, log_prior
            )
            a, b = graph.update_states(q, s, f, a0, b0)
        out = dict(est)
        out.update(q=np.asarray(q), a=np.asarray(a), b=np.asarray(b), succ=s, fail=f)
        return out

    def mixture(self, est: State):
        n = est["q"].shape[0]
        return (
            np.broadcast_to(est["a"], (n, self.num_states)),
            np.broadcast_to(est["b"], (n, self.num_states)),
            est["q"],
        )

    def elbo(self, est: State) -> float:
        """The current ELBO (diagnostics and tests)."""
        a0, b0, log_prior = self._priors()
        return float(
            graph.elbo(
                est["q"], est["a"], est["b"], est["succ"], est["fail"], est["nbr"], est["w"],
                self.coupling, log_prior, a0, b0,
            )
        )  # fmt: skip


ESTIMATORS = {"beta": BetaEstimator, "graph": GraphEstimator}


def make_estimator(name: str, **kwargs):
    """An estimator by registry name ("beta" or "graph") with its hyperparameters."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown difficulty estimator {name!r}; valid: {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name](**kwargs)
