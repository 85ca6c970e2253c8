"""Locked at the Entrance (EBL): where RLVR narrows the solution space, on Countdown.

The RL run the analyses read: GRPO (experiments/baselines/grpo.py) on Countdown,
whose evaluations report solution coverage and entrance-family entropy besides
pass@k (Countdown's `group_metrics`), with step checkpoints kept as the early
checkpoints of the late-layer interpolation. Then
  python scripts/analyze_entrance.py runs/ebl step:4
writes runs/ebl/entrance/: coverage and entrance entropy of base vs RL, the
per-token likelihood shift (RL − base) aligned to the first arithmetic operator,
the entrance-prefix intervention (completion after forcing each valid family's
prefix, low- vs high-access families) and the α sweep of θ_RL with the late
layers pulled toward the step-4 checkpoint.

Paper-fixed (abstract): Countdown's exhaustive solution sets; entrance family =
(first operand, operator); coverage; likelihood shift before vs after the first
arithmetic operation; entrance-prefix intervention; late-layer interpolation
(1 − α)·θ_RL + α·θ_early with an early checkpoint. Paper: +37% coverage at no
pass@1 loss; 11–16x larger likelihood shift before the first operation;
low-access completion 0.018 → 0.212 when forced.
Ours: the GRPO baseline (G = 8, 20 steps, lr 1e-4); n = 16 evaluation samples
(coverage needs several per problem); the last 2 of 4 layers interpolated
(--layers=-2:); α ∈ {0, .25, .5, .75, 1}; low access = below 0.1.

Command (the CPU run):
  taskset -c 1 nice -n 5 python -m rlvr_jax.main --config=experiments/ebl/ebl.py --workdir=runs/ebl
  taskset -c 1 nice -n 5 python scripts/analyze_entrance.py runs/ebl step:4
Variants: `:pulse` (tiny random model, 2 steps).
Runtime here (2-core CPU, pinned to one loaded core): RL run 225 CPU s (21 min wall),
analysis 125 CPU s (12 min wall).
Measured (seed 0, docs/entrance.md): steps 0 → 20 pass@1 0.220 → 0.355, coverage
0.570 → 0.453, entrance entropy 1.15 → 0.42 nats; likelihood shift 6.0x larger up to the
first operator than after it; low-access families complete 0.002 free vs 0.251 forced;
interpolating layers 2-3 toward step 4 with α = 0.5: coverage 0.484 → 0.521 (+7.5%) at
pass@1 0.354 → 0.351 (α = 1: +16% coverage, pass@1 −0.022).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-3B-Instruct with GRPO on
Countdown (paper: GRPO on Qwen2.5-3B-Instruct, PPO on Qwen2.5-3B), eval n = 16 as above;
1024 new tokens (ours: Countdown answers are short); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-3b",  # paper: Qwen2.5-3B(-Instruct)
    task=None,  # countdown: the entrance families are defined on it
    max_new_tokens=1024,  # ours
)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    c.train.steps = 20
    c.eval.every = 5  # coverage / entrance entropy along the run
    c.eval.n_samples = 16  # n: samples per problem for pass@n, coverage and family entropy
    c.eval.num_problems = 64
    c.checkpoint.every = 4  # the early checkpoints of the interpolation (step:4, step:8, ...)
    c.checkpoint.keep = 5
    c = apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.model.path = "/path/to/Qwen2.5-3B-Instruct"  # paper: the GRPO run's checkpoint
    if variant == "pulse":  # coverage is defined on Countdown only
        c.task.name = "countdown"
    return c
