"""Sequential Beats Joint: the joint OPD + RL baselines, on the warm-start Countdown base.

The paper runs on-policy distillation (OPD) first and switches to RL when the
OPD validation score plateaus, and compares that with joint training, where one
update mixes the OPD signal r_t = ℓ^T − ℓ^S into the RL advantage. This file is
the joint row: the weighted-additive baseline A_t = A_i + w·r_t (transform
"opd_additive"). The other joint baseline, teacher-modulated rescaling
A_t = A_i·clip(exp(r_t), a, b), is one override away:
  --config.credit.transforms=opd_rescale  (credit.opd_rescale.low / high = a, b)
The sequential arm is two runs (no in-run stage switch exists yet; the switch
rule `core.opd.opd_plateaued` is ours: no eval gain > δ over k evals):
  1. OPD:  this file with --config.credit.transforms=opdvr --config.credit.opdvr.gate=none
  2. RL:   experiments/baselines/grpo.py with --config.model.source=pretrained
           --config.model.path=runs/seq_opd_rl_opd/export
Report pass@k curves (eval.n_samples) of the three.

Paper-fixed (abstract): OPD then RL; the two joint baselines; a plateau switch.
Ours: w = 1 (the unweighted sum; the paper sweeps it), f = clip(exp(r_t), 0.5, 2)
for the rescaling form; the warm-start teacher of the policy's domain; GRPO
advantages, token PPO clip ε = 0.2, G = 8.

Command: python -m rlvr_jax.main --config=experiments/seq_opd_rl/seq_opd_rl.py --workdir=runs/joint
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; teacher = the policy
under the reference-solution context, score.teacher.source = "hint": no warm-start
model is trained).
Runtime: not measured; grpo.py's plus one teacher forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B student, Qwen3-32B teacher
(ours; the abstract names no model; placeholder path, override via
--config.score.teacher.path); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_teacher, apply_variant, default_config

PAPER = dict(
    model="qwen3-8b",  # ours: the abstract names no model
    teacher="Qwen3-32B",  # ours: a larger model of the student's family
)


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher"  # ℓ^T
    c.credit.name = "grpo"
    c.credit.transforms = "opd_additive"  # "opd_rescale": the teacher-modulated baseline
    c.credit.opd_additive.weight = 1.0  # w (ours)
    c.credit.opd_rescale.low = 0.5  # a of clip(exp(r_t), a, b) (ours)
    c.credit.opd_rescale.high = 2.0  # b (ours)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_teacher(apply_variant(c, variant, paper=PAPER), variant)
