"""OPDVR (On-Policy Distillation with Verifiable Reward) on the warm-start Countdown base.

Reproduces, in miniature, OPDVR against plain OPD and GRPO: the student samples,
the warm-start Countdown teacher scores each sampled token, r_t = ℓ^T − ℓ^S, and
the verifier gates it: correct rollouts keep max(0, r_t), wrong ones min(0, r_t),
so a correct rollout is never pushed down and a wrong one never up.

Paper-fixed (abstract): the gated OPD reward, no new hyperparameters; GRPD (×
(|A_i| + u)) as the variant; the inverted gate as the ablation.
Ours: the gated reward replaces the advantage (credit.opdvr.rl_coef = 0); the
teacher is the warm-start teacher of the policy's domain (score.teacher.source
"warm_start", role "teacher"; trained on first use if missing); GRPO advantages
(read only by GRPD), token PPO clip ε = 0.2, G = 8.

Variants by override: GRPD --config.credit.opdvr.grpd=True [--config.credit.opdvr.u=0.1];
inverted gate --config.credit.opdvr.gate=inverted; plain OPD --config.credit.opdvr.gate=none.

Command: python -m rlvr_jax.main --config=experiments/opdvr/opdvr.py --workdir=runs/opdvr
Variants: `:arithmetic` (arithmetic base and teacher), `:pulse` (tiny random model,
2 steps; its teacher is the policy itself under the reference-solution context,
score.teacher.source = "hint", so no warm-start model is trained).
Runtime: not measured; grpo.py's plus one teacher forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B student, Qwen3-32B teacher
(both ours; the abstract names no model; teacher path placeholder /path/to/Qwen3-32B,
override via --config.score.teacher.path); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_teacher, apply_variant, default_config

PAPER = dict(
    model="qwen3-8b",  # ours: the abstract names no model
    teacher="Qwen3-32B",  # ours: a larger model of the student's family (shared tokenizer)
)


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher"  # teacher_logps_BxT = ℓ^T
    c.credit.name = "grpo"
    c.credit.transforms = "opdvr"
    c.credit.opdvr.gate = "relu"  # correct: max(0, r_t), wrong: min(0, r_t)
    c.credit.opdvr.grpd = False  # GRPD: × (|A_i| + u)
    c.credit.opdvr.u = 0.0  # u (GRPD only)
    c.credit.opdvr.rl_coef = 0.0  # ours: the gated reward is the advantage
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_teacher(apply_variant(c, variant, paper=PAPER), variant)
