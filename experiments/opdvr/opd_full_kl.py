"""Plain OPD with a distribution-level reverse KL (full): the OPD row of experiments/opdvr.

The student samples; the loss is the full-vocabulary reverse KL
KL(π_θ ‖ π_T)_t = Σ_v π_θ(v)(log π_θ(v) − log π_T(v)) at every response token
(loss "opd_full_kl", chunked over the vocabulary: `models.vocab.reverse_kl`).
The teacher enters as its final hidden states (score signal "teacher_hidden")
and its output kernel.
No verifier enters the update (rl_coef = 0); the sampled-token OPD reward of
opdvr.py (gate "none") is the single-sample estimate of the same KL.

Paper-fixed (OPD): minimise the reverse KL from the student to the teacher on
the student's own samples.
Ours: chunk 8192 vocabulary columns; the warm-start teacher of the policy's domain; every
row (rows = "all"); G = 8; the loss is normalised like the PPO surrogate
(seq-mean-token-mean).

Command: python -m rlvr_jax.main --config=experiments/opdvr/opd_full_kl.py --workdir=runs/opd_full
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; the teacher is the
policy itself under the reference-solution view, so no warm start is trained).
Runtime: not measured; grpo.py's plus one teacher forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B student, Qwen3-32B teacher
(ours: no model named; placeholder path, override via
--config.score.teacher_hidden.path), full-vocabulary reverse KL as above; the shared
block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen3-8b",  # ours
    teacher="Qwen3-32B",  # ours: a larger model of the student's family
)


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher_hidden"
    t = c.score.teacher_hidden
    t.source, t.domain, t.role = "warm_start", "", "teacher"  # domain "" = model.domain
    c.credit.name = "grpo"  # computed, unused (rl_coef = 0)
    c.loss.name = "opd_full_kl"
    c.loss.opd_full_kl.rows = "all"
    c.loss.opd_full_kl.rl_coef = 0.0  # pure distillation
    c.loss.opd_full_kl.kl_coef = 1.0
    c.data.group_size = 8  # G
    apply_variant(c, variant, paper=PAPER)
    if variant == "pulse":  # no trained teacher: the policy under the solution view
        t.source = "hint"
    return c
