"""GRPO (Shao et al. 2024, DeepSeekMath §4.1) on the warm-start Countdown base (the default run).

Reproduces, in miniature, the baseline row every seed paper's table starts
from: group-normalised advantages A_i = (r_i − mean) / (std + ε) over G = 8
rollouts per prompt, the token PPO clip surrogate (ε = 0.2) averaged per
sequence then over sequences, and the policy sharpening pass@1 toward pass@8.

Command (measured 8m26s on this 2-core CPU with an empty cache, i.e. including
training and evaluating the warm-start base, while another job shared the
machine; the RL part alone is ~4–6 min):
  python -m rlvr_jax.main --config=experiments/baselines/grpo.py --workdir=runs/grpo
Variants: `:arithmetic` (the arithmetic base), `:pulse` (tiny random model, 2 steps).
Measured here (docs/baselines.md): held-out pass@1 0.254 → 0.356, +10.3 points
(+7.9..+12.2 over 3 seeds); pass@8 0.667 → 0.625.

Our choices: β = 0 (no KL term: DAPO, Dr.GRPO and most recent GRPO runs drop
it; set loss.kl_coef = 0.04 with kl_kind "k3" for DeepSeekMath's), two
minibatch updates per rollout batch (so the clip is active), lr 1e-4 constant.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours: the seed papers'
GRPO baseline as experiments/paper_scale runs it) with the shared block's DAPO batch and
optimizer; ε = 0.2, β = 0 as above.
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: as experiments/paper_scale/qwen3_8b_grpo.py


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"  # A_i = (r_i − mean_g r) / (std_g r + ε)
    c.credit.grpo.eps = 1e-6  # ε
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = 0.2  # ε
    c.loss.ppo_clip.eps_high = 0.2
    c.loss.aggregation = "seq-mean-token-mean"  # (1/G) Σ_i (1/|o_i|) Σ_t
    c.data.group_size = 8  # G
    c.train.steps = 20  # a trial run gained +12 points of pass@1 by step 20, none more by 40
    return apply_variant(c, variant, paper=PAPER)
