"""Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", §3.2) on the warm-start bases.

GRPO without its two biases: advantages r_i − mean_g r (no division by the
group std) and a constant loss normaliser (rows × L_max, the generation budget;
padding rows without a loss token are not counted, as in verl) instead of
dividing each sequence's loss by its own length.

Command: python -m rlvr_jax.main --config=experiments/baselines/dr_grpo.py --workdir=runs/dr_grpo
Variants: `:arithmetic`, `:pulse`. Runtime here ~ that of grpo.py (same batch).
Expected: pass@1 gains similar to GRPO with shorter wrong responses (the paper's
claim is about length growth of incorrect responses, not accuracy).

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.345 after
20 steps; 308 s of RL steps on one loaded core.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-Math-7B (paper); N = 3072 so
P + N fits its 4k context (ours); the constant normaliser is that N; lr 1e-6 and the
rest of the shared block are ours.
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-math-7b",  # paper: Oat-Zero is Dr. GRPO on Qwen2.5-Math-7B
)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "dr_grpo"  # A_i = r_i − mean_g r
    c.loss.name = "ppo_clip"
    c.loss.aggregation = "constant"  # Σ_{i,t} loss / (rows × L_max)
    c.loss.constant = 0.0  # L_max per row; 0: rollout.max_new_tokens
    # Without the 1/|o_i| and 1/std factors the gradient is ~L_max/|o| × smaller per token.
    c.optimizer.lr = 3e-4
    return apply_variant(c, variant, paper=PAPER)
