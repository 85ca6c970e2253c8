"""DASH (Divergence-Adaptive Supervision Horizons) on the privileged warm-start Countdown base.

Reproduces, in miniature, DASH against plain on-policy self-distillation
(OPSD): the self-teacher is the policy itself with the reference solution in
its prompt; d_t = ℓ^T − ℓ^S per sampled token; the gap d_t − mean d sets a
gate and an adaptive horizon H_t, and each token's credit aggregates the
divergences after it, a_t = Σ_{k<H_t} γ^k d_{t+k}. No forward pass beyond OPSD's.
Plain OPSD is --config.credit.dash.h_max=1.

Paper-fixed (abstract): the self-distillation signal, a gate from the gap, backward
multi-step aggregation over an adaptive horizon, no extra forward passes.
Ours: gate = 2σ(κ|gap|) − 1, H_t from H_min = 1 to H_max = 8, κ = 1, γ = 0.9; the
credit is the DASH term alone (outcome_coef = 0, as OPSD; > 0 adds the GRPO
advantage); the privileged view "{prompt}\\nReference solution:\\n{solution}"
(the arithmetic hint's wording, so it also works on Countdown, which has no
`hint`); token PPO clip ε = 0.2, G = 8.

The warm-start bases see these privileged views in SFT (docs/base_models.md,
"Privileged-context examples": on arithmetic the hinted base solves 0.77 vs 0.43
plain; on Countdown the "privileged" base solves 0.74 vs 0.15 plain). Every step logs the
self-teacher's informativeness in metrics.jsonl: teacher/noise_frac*,
teacher/r_mean_correct / _wrong and, on arithmetic, teacher/sign_agree* (the
sign of ℓ^T − ℓ^S against the exact first mistake).

Command: python -m rlvr_jax.main --config=experiments/dash/dash.py --workdir=runs/dash
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; the self-teacher
needs no trained model in any variant).
Runtime: not measured; grpo.py's plus one policy forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract: three
unnamed scales), self-teacher under the reference solution; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import SOLUTION_VIEW, apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher"  # teacher_logps_BxT: the self-teacher's ℓ^T
    c.score.teacher.source = "hint"  # the policy under privileged context (OPSD)
    c.score.teacher.template = SOLUTION_VIEW
    c.credit.name = "grpo"
    c.credit.transforms = "dash"
    c.credit.dash.gamma = 0.9  # γ (ours)
    c.credit.dash.h_min = 1  # H_min (ours)
    c.credit.dash.h_max = 8  # H_max (ours)
    c.credit.dash.kappa = 1.0  # κ of the gate (ours)
    c.credit.dash.coef = 1.0  # weight of a_t
    c.credit.dash.outcome_coef = 0.0  # weight of the GRPO advantage (ours: 0, pure OPSD)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER, self_teacher=True)
