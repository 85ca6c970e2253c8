"""REINFORCE++ (Hu et al. 2025) on the warm-start bases.

Group-mean baseline ("REINFORCE++-baseline"), then whitening of the advantages
over every response token of the batch (mean and Bessel std over tokens, as
verl and OpenRLHF do; `whiten_over = "rows"` weighs each sequence once instead);
the PPO clip surrogate with ε = 0.2 and the token-level loss; the KL to the
initial policy as a k1 penalty in the reward (β = 0.001).

Command: python -m rlvr_jax.main --config=experiments/baselines/reinforce_pp.py --workdir=runs/rpp
Variants: `:arithmetic`, `:pulse`. Runtime here ~1.1x grpo.py's (reference forward).

Measured here (seed 0, docs/baselines.md, with the earlier whitening over rows):
held-out pass@1 0.255 → 0.375 after 20 steps; 379 s of RL steps on one loaded core.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours), reward KL β = 0.001
(k1) as above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "reinforce_pp"
    c.credit.reinforce_pp.baseline = "group"
    c.credit.reinforce_pp.whiten = True
    c.credit.reinforce_pp.whiten_over = "tokens"  # the reference's; "rows" is ours
    c.loss.name = "ppo_clip"
    c.loss.aggregation = "token-mean"
    c.loss.kl_reward_coef = 0.001  # β, KL in the reward
    c.loss.kl_kind = "k1"  # the reward's KL estimator: log π_θ − log π_ref
    return apply_variant(c, variant, paper=PAPER)
