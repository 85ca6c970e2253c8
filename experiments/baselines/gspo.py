"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization") on the warm-start bases.

Sequence-level importance ratio s_i = (π_θ(y_i|x) / π_old(y_i|x))^{1/|y_i|},
clipped to [1 − 3e-4, 1 + 4e-4] (the paper's ranges), with GRPO's group
advantages and the mean over sequences. Variant `gspo_token` in the config
(`--config.loss.name=gspo_token`) gives GSPO-token.

Command: python -m rlvr_jax.main --config=experiments/baselines/gspo.py --workdir=runs/gspo
Variants: `:arithmetic`, `:pulse`. Runtime here ~ grpo.py's.

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.359 after
20 steps; 335 s of RL steps on one loaded core.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "gspo"
    c.loss.gspo.eps_low = 3e-4  # ε_low on s_i
    c.loss.gspo.eps_high = 4e-4  # ε_high on s_i
    c.loss.aggregation = "seq-mean-token-mean"  # (1/G) Σ_i loss_i
    return apply_variant(c, variant)
