"""PPO (Schulman et al. 2017; Ouyang et al. 2022) with a learned critic on the warm-start bases.

Token-level GAE(γ = 1, λ = 0.95) with the verifier reward on the last token,
advantages whitened over the batch, the clip surrogate (ε = 0.2), and a value
model (a copy of the initial policy's trunk + scalar head) trained with the
clipped value loss; the critic trains alone for the first 5 steps so the
advantages start from a fitted baseline.

Command: python -m rlvr_jax.main --config=experiments/baselines/ppo.py --workdir=runs/ppo
Variants: `:arithmetic`, `:pulse`. Runtime here ~2x grpo.py's (critic forward
and backward); G = 8 is kept only so the batches match the other baselines.

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.353 after
20 steps; 601 s of RL steps on one loaded core.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B policy and critic (ours), γ
= 1, λ = 0.95 as above; critic lr 1e-5 (ours). The memory plan covers the policy only,
not the critic's copy of the model.
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "gae"
    c.credit.gae.gamma = 1.0  # γ
    c.credit.gae.lam = 0.95  # λ
    c.credit.gae.whiten = True
    c.loss.name = "ppo_clip"
    c.loss.aggregation = "token-mean"
    c.critic.enabled = True
    c.critic.lr = 3e-4
    c.critic.value_clip = 0.2
    c.critic.warmup_steps = 5
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.critic.lr = 1e-5  # ours (verl-style critic lr at this scale)
    return c
