"""LEEPS: latent-guided explore-exploit prompt sampling (pre-rollout selection).

Paper-fixed: candidates split into an exploit portfolio (prompts recently
observed informative, i.e. non-trivial: rewards not all equal) and an explore
portfolio prioritised by representation-space neighbours and historical
outcomes; the B slots are split by each portfolio's recent non-trivial ratio.

Ours (fields): exploit = prompts whose last group was non-trivial within the
last `window` steps; explore = every other prompt except those seen trivial
within `window` steps, scored by the smoothed non-trivial rate of its k
nearest neighbours' last outcomes, (1 + Σ nontrivial) / (2 + Σ seen), with
Gumbel noise at `temperature`; the ratios are EMAs (rate `ema`) initialised at
0.5; each portfolio keeps at least `min_frac` of the slots when it has
candidates; one round of full groups. Neighbours come from `Pool.embeddings`
(the policy's hidden states); `refresh_neighbours` recomputes them when the
caller re-embeds the pool with the current policy, which the RL select stage
does every `refresh_every` steps (`scheduling.select.Select`; ours: 10,
0 keeps the step-0 neighbours). `neighbour_overlap` measures how much a
refresh changed them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from rlvr_jax.scheduling.common import SchedulerBase, empty_plan
from rlvr_jax.scheduling.graph import nearest_neighbours


def knn(emb_NxE: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """[N, k] indices of each prompt's k most cosine-similar other prompts (most similar first)."""
    return nearest_neighbours(emb_NxE, k, chunk)


def neighbour_overlap(old_NxK: np.ndarray, new_NxK: np.ndarray) -> float:
    """Share of (prompt, neighbour) pairs of `new_NxK` that `old_NxK` also has (order ignored)."""
    old, new = np.asarray(old_NxK), np.asarray(new_NxK)
    if new.size == 0:
        return 1.0
    return float((new[:, :, None] == old[:, None, :]).any(-1).mean())


def portfolio_split(slots: int, ratio_exploit, ratio_explore, n_exploit, n_explore, min_frac):
    """Slots for (exploit, explore): proportional to the ratios, floors, candidate limits."""
    total = ratio_exploit + ratio_explore
    share = 0.5 if total <= 0 else ratio_exploit / total
    share = float(np.clip(share, min_frac, 1 - min_frac))
    a = int(min(round(share * slots), n_exploit))
    b = min(slots - a, n_explore)
    a = min(slots - b, n_exploit)  # give back what the explore side could not use
    return a, b


@dataclasses.dataclass(frozen=True)
class LEEPS(SchedulerBase):
    """Explore-exploit prompt sampling (see module docstring).

    Attributes:
      neighbours: k for the representation-space neighbours.
      window: steps an observation stays "recent".
      ema: update rate of each portfolio's non-trivial ratio.
      min_frac: minimum share of each portfolio.
      temperature: Gumbel noise scale on explore scores (0 = greedy).
      refresh_every: steps between re-embeddings of the pool with the current
        policy (applied by the caller that holds the policy; 0 = never).
    """

    neighbours: int = 10
    window: int = 20
    ema: float = 0.3
    min_frac: float = 0.1
    temperature: float = 0.5
    refresh_every: int = 10
    needs_embeddings: ClassVar[bool] = True

    def embedding_refresh_every(self) -> int:
        return self.refresh_every

    def _init_extra(self, pool, budget):
        if pool.embeddings is None:
            raise ValueError("LEEPS needs Pool.embeddings [N, E]; got None")
        n = pool.num_prompts
        return {
            "leeps": {
                "nbr": knn(np.asarray(pool.embeddings, np.float32), self.neighbours),
                "last_seen": np.full(n, -(10**9), np.int32),
                "nontrivial": np.zeros(n, bool),
                "ratio": np.full(2, 0.5, np.float32),  # exploit, explore
                "portfolio": np.zeros(n, np.int8),  # this step: 1 exploit, 2 explore
            }
        }

    def refresh_neighbours(self, state, embeddings_NxE):
        """The state with neighbours recomputed from new embeddings (pure)."""
        out = dict(state)
        out["leeps"] = dict(state["leeps"], nbr=knn(embeddings_NxE, self.neighbours))
        return out

    def refresh_embeddings(self, state, embeddings_NxE):
        """`refresh_neighbours`, and the share of neighbour pairs it kept.

        Returns:
          (state, {"leeps_neighbour_overlap": share}).
        """
        out = self.refresh_neighbours(state, embeddings_NxE)
        overlap = neighbour_overlap(state["leeps"]["nbr"], out["leeps"]["nbr"])
        return out, {"leeps_neighbour_overlap": overlap}

    def _propose(self, state, rng, budget):
        if int(state["round"]) > 0:
            return empty_plan(int(state["round"]))
        s = state["leeps"]
        recent = (int(state["step"]) - s["last_seen"]) <= self.window
        exploit = np.flatnonzero(recent & s["nontrivial"])
        explore = np.flatnonzero(~recent)
        seen = (s["last_seen"] > -(10**9))[s["nbr"]]
        hits = (s["nontrivial"][s["nbr"]] & seen).sum(1)
        score = (1.0 + hits) / (2.0 + seen.sum(1))
        a, b = portfolio_split(
            budget.groups, *s["ratio"], len(exploit), len(explore), self.min_frac
        )
        # Exploit the most recently informative first (random among ties).
        age = int(state["step"]) - s["last_seen"][exploit] + rng.random(len(exploit))
        pick_a = exploit[np.argsort(age, kind="stable")[:a]]
        noisy = np.log(score[explore]) + self.temperature * rng.gumbel(size=len(explore))
        pick_b = explore[np.argsort(-noisy, kind="stable")[:b]]
        plan = self._full_groups(state, np.concatenate([pick_a, pick_b]), budget, 0)
        tag = np.concatenate([np.ones(len(pick_a), np.int8), np.full(len(pick_b), 2, np.int8)])
        return dataclasses.replace(
            plan, info={"prompts": np.concatenate([pick_a, pick_b]).astype(np.int32), "tag": tag}
        )

    def _after_observe(self, state, plan, outcomes):
        if "tag" in plan.info:
            state["leeps"]["portfolio"][plan.info["prompts"]] = plan.info["tag"]
        return state

    def _finish_extra(self, state, budget, stats, prompts):
        s = state["leeps"]
        seen = np.flatnonzero(stats["n"] > 0)
        s["last_seen"][seen] = int(state["step"])
        s["nontrivial"][seen] = stats["effective"][seen]
        for i, tag in enumerate((1, 2)):
            members = seen[s["portfolio"][seen] == tag]
            if len(members):
                rate = float(np.mean(stats["effective"][members]))
                s["ratio"][i] = (1 - self.ema) * s["ratio"][i] + self.ema * rate
        s["portfolio"][:] = 0
        return state
