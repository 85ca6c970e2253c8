"""SAF-OPD (Stable Advantage Fusion) on the warm-start Countdown base.

Reproduces, in miniature, the fusion of the RLVR and OPD advantages
A_t = A_GRPO,t + w(s)·C(S(A_OPD,t)), A_OPD,t = ℓ^T − ℓ^S, against GRPO and against
the unstabilised sum (experiments/seq_opd_rl: weighted-additive). Each stage is
switchable for the ablation table: --config.credit.saf_opd.sparsify / compress /
schedule = False.

Paper-fixed (abstract): the stages and their order: sparsify (keep the top
fraction by magnitude), compress (bounded, to the RLVR advantage scale), a
warm-up then anneal weight.
Ours: keep ρ = 0.2 of the batch's OPD tokens; C(x) = s·tanh(x/s) with s = the mean
|A_GRPO| (scale = 0: adaptive); w rises 0 → 1 over 2 steps, holds 6, falls to 0
over the last 12 of the 20 steps (the registered 10/0/100 schedule is for longer
runs); the warm-start teacher of the policy's domain; token PPO clip ε = 0.2, G = 8.

Command: python -m rlvr_jax.main --config=experiments/saf_opd/saf_opd.py --workdir=runs/saf_opd
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; teacher = the policy
under the reference-solution context, score.teacher.source = "hint": no warm-start
model is trained), `:code` (the synthetic code task on its base,
rewards from the sandbox; the warm-start code_synth teacher; `:code,pulse`;
`:code,paper`: the paper scale on your code file with the code suite).
Runtime: not measured; grpo.py's plus one teacher forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B student (paper:
Qwen3-1.7B/4B/8B), Qwen3-32B teacher (ours; placeholder path, override via
--config.score.teacher.path); w(t) stages rescaled to the 500 steps (ours); the shared
block (ours).
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
    model="qwen3-8b",  # paper: Qwen3-1.7B/4B/8B
    teacher="Qwen3-32B",  # ours: a larger model of the student's family
)


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "teacher"  # ℓ^T
    c.credit.name = "grpo"
    c.credit.transforms = "saf_opd"
    s = c.credit.saf_opd
    s.sparsify = True  # S
    s.keep_frac = 0.2  # ρ (ours)
    s.per_row = False  # rank over the batch
    s.compress = True  # C
    s.scale = 0.0  # s of s·tanh(x/s): 0 = mean |A_GRPO| (ours)
    s.schedule = True  # w(step)
    s.w_max = 1.0  # peak w (ours)
    s.w_end = 0.0  # final w (ours)
    s.warmup_steps = 2  # ours, fitted to train.steps = 20
    s.hold_steps = 6
    s.anneal_steps = 12
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    c.train.steps = 20
    base, paper = code_variant(variant, PAPER)
    c = apply_teacher(apply_variant(c, base, paper=paper), base)
    apply_code_task(c, variant)
    if base == "paper":
        s.warmup_steps, s.hold_steps, s.anneal_steps = 50, 150, 300  # ours: over 500 steps
    return c
