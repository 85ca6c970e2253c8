"""A simulated prompt population and sampler, for auditing schedulers without a model.

`make_population` draws N prompts in C clusters. Each cluster has a difficulty
mode (a mixture of hard / medium / easy logits) and a centre in embedding
space, so neighbours share difficulty; prompt i's success rate is
sigmoid(μ_c + σ ε_i) and its embedding is its cluster centre plus noise plus a
component along one axis proportional to its logit. Response lengths are
log-normal around a per-prompt scale, longer (and more spread) when wrong, and
capped at `max_tokens` (a capped response counts as finished).

`SimSampler` answers scheduler plans like a real sampler would: fresh rows
draw a hidden full response (correct?, length) and reveal only its first
`plan.max_tokens` tokens when that is set (PAIR prefixes), with prefix
features [(2c - 1)·signal + N(0, 1), log length + N(0, 0.3)]; continued rows
reveal the rest. With `drift > 0` the population learns: at `end_step`, each
prompt's logit rises by drift × (its complete rollouts this step) / G.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlvr_jax.scheduling.base import Outcomes, Plan, Pool

# (mean logit, weight) of the cluster difficulty modes: many saturated groups.
DEFAULT_MODES = ((-3.0, 0.35), (0.0, 0.3), (3.0, 0.35))


@dataclasses.dataclass
class Population:
    """Latent truth of a simulated prompt pool.

    Attributes:
      logit_N: success logits (success rate = sigmoid(logit)); mutable under drift.
      cluster_N: cluster of each prompt.
      emb_NxE: embeddings (cluster centre + noise + logit direction).
      length_N: per-prompt response length scale (tokens).
    """

    logit_N: np.ndarray
    cluster_N: np.ndarray
    emb_NxE: np.ndarray
    length_N: np.ndarray

    @property
    def success_N(self) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit_N))

    def pool(self) -> Pool:
        return Pool(num_prompts=len(self.logit_N), embeddings=self.emb_NxE)


def make_population(
    seed: int,
    num_prompts: int = 1000,
    num_clusters: int = 40,
    dim: int = 16,
    modes=DEFAULT_MODES,
    within_sd: float = 0.8,
    emb_noise: float = 0.6,
    difficulty_axis: float = 0.3,
    mean_length: float = 300.0,
) -> Population:
    """A clustered population (see module docstring).

    Args:
      seed: RNG seed.
      num_prompts, num_clusters, dim: N, C, E.
      modes: (mean logit, weight) mixture of cluster difficulties.
      within_sd: σ of a prompt's logit around its cluster's.
      emb_noise: embedding noise around the cluster centre.
      difficulty_axis: weight of the logit on embedding axis 0.
      mean_length: typical length of a correct response.
    Returns:
      Population.
    """
    rng = np.random.default_rng(seed)
    means = np.array([m for m, _ in modes])
    weights = np.array([w for _, w in modes])
    cluster_mu = means[rng.choice(len(modes), num_clusters, p=weights / weights.sum())]
    cluster_mu = cluster_mu + 0.5 * rng.normal(size=num_clusters)
    centres = rng.normal(size=(num_clusters, dim))
    cluster = rng.integers(num_clusters, size=num_prompts)
    logit = cluster_mu[cluster] + within_sd * rng.normal(size=num_prompts)
    emb = centres[cluster] + emb_noise * rng.normal(size=(num_prompts, dim))
    emb[:, 0] += difficulty_axis * logit
    length = mean_length * np.exp(0.3 * rng.normal(size=num_prompts))
    return Population(logit, cluster, emb.astype(np.float32), length)


class SimSampler:
    """Answers `Plan`s with simulated outcomes (a stand-in for the trainer's sampler).

    Attributes:
      hidden: slot -> (correct, full length, tokens shown) of this step's rollouts.
      tokens_if_full: sum of full lengths of every rollout started this step.
    """

    def __init__(
        self,
        population: Population,
        seed: int,
        *,
        group_size: int = 8,
        max_tokens: int = 1024,
        prefix_signal: float = 1.0,
        drift: float = 0.0,
    ):
        self.pop = population
        self.rng = np.random.default_rng(seed)
        self.group_size = group_size
        self.max_tokens = max_tokens
        self.prefix_signal = prefix_signal
        self.drift = drift
        self.start_step()

    def start_step(self) -> None:
        self.hidden: dict[int, tuple[bool, int, int]] = {}
        self.tokens_if_full = 0
        self._spent = np.zeros(len(self.pop.logit_N))

    def draw(self, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hidden full responses of `prompts`: (correct bool, length int)."""
        p = self.pop.success_N[prompts]
        correct = self.rng.random(len(prompts)) < p
        scale = self.pop.length_N[prompts] * np.where(correct, 1.0, 1.8)
        sd = np.where(correct, 0.3, 0.45)
        length = np.exp(np.log(scale) + sd * self.rng.normal(size=len(prompts)))
        return correct, np.clip(np.round(length), 1, self.max_tokens).astype(int)

    def features(self, correct: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Prefix features of hidden responses (noisy signals of correctness and length)."""
        n = len(correct)
        sig = (2.0 * correct - 1.0) * self.prefix_signal + self.rng.normal(size=n)
        return np.stack([sig, np.log(length) + 0.3 * self.rng.normal(size=n)], 1).astype(np.float32)

    def __call__(self, plan: Plan) -> Outcomes:
        rows = plan.num_rows
        correct = np.zeros(rows, bool)
        length = np.zeros(rows, int)
        shown = np.zeros(rows, int)
        before = np.zeros(rows, int)
        fresh = plan.valid_R & ~plan.cont_R
        cont = plan.valid_R & plan.cont_R
        correct[fresh], length[fresh] = self.draw(plan.prompt_R[fresh])
        for i in np.flatnonzero(cont):
            correct[i], length[i], before[i] = self.hidden[int(plan.rollout_R[i])]
        cap = plan.max_tokens if plan.max_tokens > 0 else self.max_tokens
        shown[fresh] = np.minimum(length[fresh], cap)
        shown[cont] = np.minimum(length[cont], before[cont] + cap) - before[cont]
        for i in np.flatnonzero(plan.valid_R):
            slot = int(plan.rollout_R[i])
            if fresh[i]:
                self.tokens_if_full += int(length[i])
            self.hidden[slot] = (bool(correct[i]), int(length[i]), int(before[i] + shown[i]))
        finished = plan.valid_R & (before + shown >= length)
        np.add.at(self._spent, plan.prompt_R[finished], 1.0)
        return Outcomes(
            reward_R=correct.astype(np.float32),
            correct_R=correct,
            tokens_R=shown.astype(np.int32),
            finished_R=finished,
            features_RxF=self.features(correct, np.maximum(length, 1)),
        )

    def end_step(self) -> None:
        """Applies drift (if any) and clears this step's hidden rollouts."""
        if self.drift:
            self.pop.logit_N = self.pop.logit_N + self.drift * self._spent / self.group_size
        self.start_step()
