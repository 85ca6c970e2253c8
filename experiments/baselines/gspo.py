"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization") on the warm-start bases.

Sequence-level importance ratio s_i = (π_θ(y_i|x) / π_old(y_i|x))^{1/|y_i|},
clipped to [1 − 3e-4, 1 + 4e-4] (the paper's ranges), with GRPO's group
advantages and the mean over sequences. Variant `gspo_token` in the config
(`--config.loss.name=gspo_token`) gives GSPO-token.

Command: python -m rlvr_jax.main --config=experiments/baselines/gspo.py --workdir=runs/gspo
Variants: `:arithmetic`, `:pulse`. Runtime here ~ grpo.py's.

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.359 after
20 steps; 335 s of RL steps on one loaded core.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours: the paper trains a
Qwen3 MoE model we have no preset for); ε_low/ε_high 3e-4/4e-4 on s_i as above (paper);
the rest is the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "gspo"
    c.loss.gspo.eps_low = 3e-4  # ε_low on s_i
    c.loss.gspo.eps_high = 4e-4  # ε_high on s_i
    c.loss.aggregation = "seq-mean-token-mean"  # (1/G) Σ_i loss_i
    return apply_variant(c, variant, paper=PAPER)
