"""H²SD (Hybrid Hindsight Self-Distillation) on the privileged warm-start Countdown base.

Reproduces, in miniature, H²SD against OPSD and GRPO. The self-teacher is the
policy under a privileged context chosen by the verdict (score signal "hint"):
  successes: prompt + the response confirmed correct + a rephrasing
    instruction; its token probabilities only modulate the update magnitude,
    A'_t = A_i·m_t, m_t = clip(exp(ℓ^H − ℓ^S), a, b) renormalised to mean 1
    (transform "h2sd");
  failures: prompt + the reference solution; the student minimises the reverse
    KL to that teacher, as a loss on the current log-probs (loss "h2sd_kl":
    PPO clip + λ·ρ_t·sg(ℓ_θ − ℓ^H) on failed rows), and keeps β·A_i.
The reverse KL is counted once: in the loss, so the transform's own sampled-token
KL reward is off (credit.h2sd.kl_coef = 0). The credit-only form is
  --config.loss.name=ppo_clip --config.credit.h2sd.kl_coef=1.0
OPSD, the comparison row: experiments/dash/dash.py with --config.credit.dash.h_max=1.

Paper-fixed (abstract): the split by verdict, magnitude-only modulation on
successes, reverse KL to the hinted teacher on failures.
Ours: [a, b] = [0.5, 2] with renormalisation, β = 1, λ = 0.1 (chosen on the validation
split); the wordings of the two
views; token PPO clip ε = 0.2; GRPO advantages, G = 8.

The warm-start bases see these privileged views in SFT (docs/base_models.md,
"Privileged-context examples": on arithmetic the hinted base solves 0.77 vs 0.43
plain; on Countdown the "privileged" base solves 0.74 vs 0.15 plain). Every step logs the
self-teacher's informativeness in metrics.jsonl: hint/noise_frac*,
hint/r_mean_correct / _wrong and, on arithmetic, hint/sign_agree* (the
sign of ℓ^T − ℓ^S against the exact first mistake).

Command: python -m rlvr_jax.main --config=experiments/h2sd/h2sd.py --workdir=runs/h2sd
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; the teacher is the
policy itself, so no variant needs a trained teacher).
Runtime: not measured; grpo.py's plus one policy forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model), self-teacher views as above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config
from rlvr_jax.train.privileged import REPHRASE_VIEW
from rlvr_jax.train.privileged import SOLUTION_VIEW as HINT_VIEW

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "hint"  # hint_logps_BxT = ℓ^H, the view chosen by the verdict
    c.score.hint.template = HINT_VIEW  # failed rows
    c.score.hint.correct_template = REPHRASE_VIEW  # successful rows
    c.credit.name = "grpo"
    c.credit.transforms = "h2sd"
    c.credit.h2sd.low = 0.5  # a of m_t (ours)
    c.credit.h2sd.high = 2.0  # b of m_t (ours)
    c.credit.h2sd.renorm = True  # mean m_t = 1 per row: the row's credit kept
    c.credit.h2sd.fail_rl_coef = 1.0  # β on failed rows (ours)
    c.credit.h2sd.kl_coef = 0.0  # the reverse KL is in the loss below
    c.loss.name = "h2sd_kl"
    c.loss.h2sd_kl.eps_low = 0.2  # ε
    c.loss.h2sd_kl.eps_high = 0.2
    # λ of the failed rows' reverse KL (ours): chosen on the validation split from
    # (0.03, 0.1, 0.3, 1) (docs/reproductions/h2sd.md; 1 before that sweep).
    c.loss.h2sd_kl.kl_coef = 0.1
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER, self_teacher=True)
