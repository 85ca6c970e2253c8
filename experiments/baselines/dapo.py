"""DAPO (Yu et al. 2025) on the warm-start bases: clip-higher, dynamic sampling, token-level
loss and the soft overlong penalty.

  clip-higher: ε_low = 0.2, ε_high = 0.28 (paper values).
  dynamic sampling: groups whose G rewards are all equal are dropped and more
    prompts are sampled until B groups are informative (cap: 3 rounds; ours).
  token-level policy gradient loss: Σ_{i,t} / Σ_i |o_i| ("token-mean").
  overlong reward shaping: linear penalty over the last L_cache = 16 tokens of
    the L_max = 64 budget (paper: 4k of 20k; ours scaled to our lengths).
  no KL term (β = 0), as in the paper.

Command: python -m rlvr_jax.main --config=experiments/baselines/dapo.py --workdir=runs/dapo
Variants: `:arithmetic`, `:pulse`. Runtime here: up to ~3x grpo.py's sampling
per step when most groups are uninformative (the rounds are logged).

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.393 after
20 steps; 387 s of RL steps on one loaded core.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = 0.2  # ε_low
    c.loss.ppo_clip.eps_high = 0.28  # ε_high (clip-higher)
    c.loss.aggregation = "token-mean"
    c.select.name = "dynamic_sampling"
    c.select.max_rounds = 3
    c.reward.overlong_cache = 16  # L_cache
    c.reward.overlong_penalty = 1.0
    return apply_variant(c, variant)
