"""H²SD with the full-distribution reverse KL on its failures (`core.h2sd.full_reverse_kl`).

As experiments/h2sd/h2sd.py, except that the failed rollouts minimise the
full-vocabulary reverse KL(π_θ ‖ π_H)_t to the hinted self-teacher at every
response token (loss "opd_full_kl" on the failed rows, chunked over the
vocabulary) instead of its sampled-token estimate (loss "h2sd_kl"). The
teacher's distribution is the policy's own under the reference-solution view:
its final hidden states at π_old (score signal "teacher_hidden", source
"hint") with the policy's output kernel, stop-gradient. Successes keep the
magnitude-only modulation by the rephrasing view (transform "h2sd", signal "hint").

Paper-fixed (abstract): reverse KL toward the hinted teacher on failures,
magnitude-only modulation on successes.
Ours: as h2sd.py; the teacher kernel is the current one, stop-gradient (at the
step's first update it is π_old's); chunk 8192.

Command: python -m rlvr_jax.main --config=experiments/h2sd/h2sd_full.py --workdir=runs/h2sd_full
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; h2sd.py's plus one policy forward under the hint view.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours), full-vocabulary
reverse KL on failed rows; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config
from rlvr_jax.train.privileged import REPHRASE_VIEW, SOLUTION_VIEW

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "hint,teacher_hidden"  # ℓ^H for the modulation, π_H's hidden states
    c.score.hint.template = SOLUTION_VIEW
    c.score.hint.correct_template = REPHRASE_VIEW  # successes: the rephrasing view
    c.score.teacher_hidden.source = "hint"  # the policy itself
    c.score.teacher_hidden.template = SOLUTION_VIEW  # failures: the reference view
    c.credit.name = "grpo"
    c.credit.transforms = "h2sd"
    c.credit.h2sd.low = 0.5
    c.credit.h2sd.high = 2.0
    c.credit.h2sd.renorm = True
    c.credit.h2sd.fail_rl_coef = 1.0  # β
    c.credit.h2sd.kl_coef = 0.0  # the reverse KL is in the loss
    c.loss.name = "opd_full_kl"
    c.loss.opd_full_kl.rows = "failed"
    c.loss.opd_full_kl.rl_coef = 1.0  # the PPO surrogate on A' (every row)
    c.loss.opd_full_kl.kl_coef = 1.0  # λ
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER, self_teacher=True)
