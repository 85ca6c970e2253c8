"""VIGOR (variance-guided rollout allocation) on the warm-start bases.

Paper: VIGOR — few rollouts for every prompt, then repeatedly more rollouts to the
prompts with the highest reward variance until the budget is spent. Headline: up
to 2.3x fewer rollouts to a target accuracy. Compare rollouts-to-accuracy with
experiments/baselines/grpo.py (same B·G rollout budget per step).

  2B prompts per step, n0 = 2 rollouts each, then +2 to the top half (by
  variance) of the still-eligible prompts per round, at most 2G per prompt,
  B·G rollouts per step in all (ours, matching grpo.py's budget).
  Groups of any size ≥ 2 with non-zero variance are trained on (packed into
  the fixed B·G-row batch; the rest masked out).

Command: python -m rlvr_jax.main --config=experiments/vigor/vigor.py --workdir=runs/vigor
Variants: `:arithmetic`, `:pulse` (CI: tiny random model, 2 steps), `:code` (the synthetic
code task on its base, rewards from the sandbox; `:code,pulse`;
`:code,paper`: the paper scale on your code file with the code suite).
Runtime here (2 CPU cores): about grpo.py's (same rollouts, a few more rounds).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every process runs the scheduler on every host's outcomes (docs/tpu_pods.md).
"""

from rlvr_jax.rl.config import apply_code_task, apply_variant, code_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.select.name = "vigor"
    c.select.max_rounds = 8
    c.select.vigor.prompt_factor = 2.0  # prompts per step / B
    c.select.vigor.initial = 2  # n0
    c.select.vigor.step = 2  # rollouts added per refined prompt per round
    c.select.vigor.refine_frac = 0.5
    c.select.vigor.max_per_prompt = 0  # 0 = 2G
    c.select.vigor.budget_factor = 1.0  # rollouts per step / (B·G)
    base, paper = code_variant(variant, PAPER)
    c = apply_variant(c, base, paper=paper)
    apply_code_task(c, variant)
    if base == "pulse":  # G = 4: 2B prompts × n0 = 2 would spend the whole budget in round 0
        c.select.vigor.prompt_factor = 1.0
    return c
