"""Entropy-based advantage shaping (Cheng et al. 2025), the baseline of CPO's table, on Countdown.

"Reasoning with Exploration: An Entropy Perspective": the GRPO advantage gets a
token bonus from the policy's (stop-gradient) entropy, clipped so it never
flips the sign: A'_t = A_t + min(α·H_t, |A_t|/κ). Compare with
experiments/cpo/cpo.py and experiments/baselines/grpo.py.

Paper-fixed: the clipped entropy term, α = 0.4, κ = 2.
Ours: GRPO advantages, token PPO clip ε = 0.2, G = 8 (grpo.py's choices).

Command: python -m rlvr_jax.main --config=experiments/cpo/entropy_shaping.py --workdir=runs/ent
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's (the entropy comes with the rollouts).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours), α, κ as above; the
shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.credit.transforms = "entropy_shaping"
    c.credit.entropy_shaping.alpha = 0.4  # α
    c.credit.entropy_shaping.kappa = 2.0  # κ
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER)
