"""Beta-Binomial kernels: predictive probabilities of a group of binary rewards.

A prompt's success rate p has a posterior that is a mixture of Betas,
Σ_k w_k Beta(α_k, β_k) (K = 1: the per-prompt posterior; K > 1: the graph
estimator's latent difficulty states). A group of G rollouts is *effective*
(carries a GRPO gradient) iff its rewards are not all equal. Under the
Beta-Binomial predictive, E[p^a (1-p)^b] = B(α+a, β+b) / B(α, β), so

    P(all G correct) = E[p^G],  P(all G wrong) = E[(1-p)^G],
    P(effective) = 1 - E[p^G] - E[(1-p)^G].

After observing k successes in n probe rollouts the posterior is updated
component-wise (weights by each component's marginal likelihood) and the
remaining m = G - n rollouts decide: a mixed probe is already effective; an
all-correct probe stays saturated with probability E'[p^m]; an all-wrong probe
with E'[(1-p)^m]. All functions are jit-able and broadcast over leading axes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betaln, gammaln

from rlvr_jax.scheduling.base import bucket_rows


def log_beta_moment(alpha, beta, a, b):
    """log E[p^a (1-p)^b] for p ~ Beta(alpha, beta) (a, b >= 0, broadcast)."""
    return betaln(alpha + a, beta + b) - betaln(alpha, beta)


def betabinom_logpmf(k, n, alpha, beta):
    """log P(k successes in n) under the Beta(alpha, beta)-Binomial predictive."""
    log_choose = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    return log_choose + log_beta_moment(alpha, beta, k, n - k)


def posterior_mixture(alpha_xK, beta_xK, weight_xK, successes_x, trials_x):
    """Conditions a Beta mixture on k successes in n trials.

    Args:
      alpha_xK, beta_xK, weight_xK: mixture components (weights sum to 1 over K).
      successes_x, trials_x: observed counts (broadcast against the leading axes).
    Returns:
      (alpha_xK, beta_xK, weight_xK) of the posterior mixture.
    """
    k = jnp.asarray(successes_x, jnp.float32)[..., None]
    n = jnp.asarray(trials_x, jnp.float32)[..., None]
    log_w = jnp.log(jnp.maximum(weight_xK, 1e-30)) + log_beta_moment(alpha_xK, beta_xK, k, n - k)
    w = jax.nn.softmax(log_w, axis=-1)
    return alpha_xK + k, beta_xK + n - k, w


@jax.jit
def prob_effective(alpha_xK, beta_xK, weight_xK, successes_x, trials_x, group_size):
    """P(a full group of `group_size` is effective | probe of k successes in n).

    Args:
      alpha_xK, beta_xK, weight_xK: the prior mixture over the prompt's success rate.
      successes_x, trials_x: the probe so far (0, 0 = before any rollout).
      group_size: G (n <= G).
    Returns:
      [x] float32 probability that the G rewards are not all equal.
    """
    k = jnp.asarray(successes_x, jnp.float32)
    n = jnp.asarray(trials_x, jnp.float32)
    a, b, w = posterior_mixture(alpha_xK, beta_xK, weight_xK, k, n)
    m = (jnp.asarray(group_size, jnp.float32) - n)[..., None]
    all_right = jnp.sum(w * jnp.exp(log_beta_moment(a, b, m, 0.0)), -1)
    all_wrong = jnp.sum(w * jnp.exp(log_beta_moment(a, b, 0.0, m)), -1)
    saturated = jnp.where(k == n, all_right, 0.0) + jnp.where(k == 0, all_wrong, 0.0)
    return jnp.clip(1.0 - saturated, 0.0, 1.0)


@jax.jit
def mixture_mean_var(alpha_xK, beta_xK, weight_xK):
    """Mean and variance of p under a Beta mixture (law of total variance)."""
    mean_k = alpha_xK / (alpha_xK + beta_xK)
    var_k = mean_k * (1 - mean_k) / (alpha_xK + beta_xK + 1)
    mean = jnp.sum(weight_xK * mean_k, -1)
    var = jnp.sum(weight_xK * (var_k + mean_k**2), -1) - mean**2
    return mean, jnp.maximum(var, 0.0)


def prob_effective_host(alpha_NxK, beta_NxK, weight_NxK, prompts_M, successes_M, trials_M, g):
    """`prob_effective` for the listed prompts, padded to a bucketed length (few compiles).

    Returns:
      [M] NumPy float probabilities.
    """
    m = len(prompts_M)
    if m == 0:
        return np.zeros(0, np.float32)
    pad = bucket_rows(m, 64) - m
    idx = np.pad(np.asarray(prompts_M, np.int64), (0, pad))
    k = np.pad(np.asarray(successes_M, np.float32), (0, pad))
    n = np.pad(np.asarray(trials_M, np.float32), (0, pad))
    a, b, w = (np.asarray(x)[idx] for x in (alpha_NxK, beta_NxK, weight_NxK))
    return np.asarray(prob_effective(a, b, w, k, n, float(g)))[:m]


def sample_mixture(rng, alpha_xK, beta_xK, weight_xK):
    """Thompson draws of p from a Beta mixture (NumPy generator; host side)."""
    alpha_xK, beta_xK, weight_xK = map(np.asarray, (alpha_xK, beta_xK, weight_xK))
    cum = np.cumsum(weight_xK, -1)
    u = rng.random(cum.shape[:-1])[..., None] * cum[..., -1:]
    comp = np.minimum((u > cum).sum(-1), cum.shape[-1] - 1)
    a = np.take_along_axis(alpha_xK, comp[..., None], -1)[..., 0]
    b = np.take_along_axis(beta_xK, comp[..., None], -1)[..., 0]
    return rng.beta(a, b)
