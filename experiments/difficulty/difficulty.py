"""Difficulty-prediction sampling (the select-stage baseline of SARA and graph difficulty) on the
warm-start bases: GRPO whose B prompts are the ones predicted closest to a target success rate.

Method (as the SARA and graph-difficulty papers use it as a baseline, "DPS"):
a per-prompt Beta posterior over the success rate, decayed each step; each step
takes the B prompts whose predicted success is nearest the target, G rollouts
each, one round, no refill. Compare `select/effective_groups` and pass@1 with
experiments/baselines/grpo.py (uniform prompts, same B·G rollouts per step).

  target 0.5 (maximal Bernoulli variance; ours), prediction: one Thompson draw
  from each posterior (ours: unseen prompts get a draw from the prior, so they
  keep being explored), posterior Beta(α0 + s, β0 + f) with counts decayed by
  λ = 0.9 per step and (α0, β0) fitted by moments to every observed group
  (empirical Bayes; ours). `select.estimator = "graph"` swaps in the graph
  difficulty estimator (`config.select.graph`).
  B = 32 prompts × G = 8 rollouts, GRPO, PPO clip, no KL (the defaults).

Command: python -m rlvr_jax.main --config=experiments/difficulty/difficulty.py \
    --workdir=runs/difficulty
Variants: `:arithmetic`, `:pulse` (CI: tiny random model, 2 steps).
Runtime here (2 CPU cores): about grpo.py's (one sampling round per step).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-3B (SARA's 1.5B/3B scale;
family ours); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every process runs the scheduler on every host's outcomes (docs/tpu_pods.md).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-3b",  # paper (SARA's comparison): a 3B model; family ours
)


def get_config(variant: str = ""):
    c = default_config()
    c.select.name = "difficulty"
    c.select.max_rounds = 1  # one round of full groups, no refill
    c.select.difficulty.target = 0.5  # predicted success rate aimed at
    return apply_variant(c, variant, paper=PAPER)
