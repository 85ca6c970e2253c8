"""RSTG ("Distill Where You Fail") on the warm-start Countdown base.

Reproduces, in miniature, OPD applied only where GRPO has no signal: on groups
whose rollouts all fail (GRPO's advantage is 0 there) the warm-start teacher's
token signal ℓ^T − ℓ^S is added, each sample weighted by the teacher's
confidence, on the tokens of high student entropy or large teacher–student
divergence only: A'_t = A_t + λ·1[all-wrong]·w_i·1[t selected]·(ℓ^T − ℓ^S).
Compare pass@1 and the share of all-wrong groups with experiments/baselines/grpo.py.

Paper-fixed (abstract): sample selection (all-wrong groups), confidence weights,
token selection by entropy or divergence.
Ours: w_i = exp(mean_t ℓ^T), the teacher's geometric-mean probability; "high" /
"large" = the top ρ = 0.2 of the candidate tokens by each score (token_select
"either"); λ = 1; the warm-start teacher of the policy's domain; GRPO
advantages, token PPO clip ε = 0.2, G = 8.
Not here: the paper's SFT on the teacher's correct solutions (a loss on
teacher-generated data, not a credit transform).

Command: python -m rlvr_jax.main --config=experiments/rstg/rstg.py --workdir=runs/rstg
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; teacher = the policy
under the reference-solution context, score.teacher.source = "hint": no warm-start
model is trained), `:code` (the synthetic code task on its base,
rewards from the sandbox; the warm-start code_synth teacher; `:code,pulse`;
`:code,paper`: the paper scale on your code file with the code suite).
Runtime: not measured; grpo.py's plus one teacher forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B student, Qwen3-32B teacher
(ours; placeholder path, override via --config.score.teacher.path); the shared block
(ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import (
    apply_code_task,
    apply_teacher,
    apply_variant,
    code_variant,
    default_config,
)

PAPER = dict(
    model="qwen3-8b",  # ours: the abstract names no model
    teacher="Qwen3-32B",  # ours: a larger model of the student's family
)


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher"  # ℓ^T
    c.credit.name = "grpo"
    c.credit.transforms = "rstg"
    c.credit.rstg.token_select = "either"  # high entropy or large |ℓ^T − ℓ^S|
    c.credit.rstg.keep_frac = 0.2  # ρ (ours)
    c.credit.rstg.confidence = True  # w_i = exp(mean ℓ^T) (ours)
    c.credit.rstg.coef = 1.0  # λ (ours)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    base, paper = code_variant(variant, PAPER)
    c = apply_teacher(apply_variant(c, base, paper=paper), base)
    apply_code_task(c, variant)
    return c
