"""DPO on verified rollouts, alone or staged SFT → DPO → RL, as pipelines.

DPO (Rafailov et al., 2023) is the preference baseline of staged post-training
("Locked at the Entrance" compares RLVR with staged SFT–DPO–RLVR pipelines).
Here the preference pairs come from the current policy's own verified rollouts:
each step samples G responses per prompt, and within a group a correct response
is preferred over a wrong one (`pipeline.dpo`); π_ref is the stage's start. The
logged `dpo_margin` (β·[Δ chosen − Δ rejected]), `dpo_accuracy` (margin > 0 on the
step's fresh pairs) and `dpo_reward_chosen` / `_rejected` show it learning.

Variants:
  ""           one DPO stage on the warm-start Countdown base
  "staged"     sft (the warm-start teacher's verified samples) → dpo → rl (GRPO)
  "cpu"        one DPO stage on the warm-start arithmetic base, a small batch
               (the measured run); "staged,cpu" the staged pipeline at that scale
  "pulse"      CI: a tiny random model, 2 steps ("staged,pulse" too)
  "paper"      below ("staged,paper" too)

Paper-fixed (DPO): the loss −log σ(β·[(ℓ_θ − ℓ_ref)(y_w) − (ℓ_θ − ℓ_ref)(y_l)]) with
sequence log-probs, β, the frozen reference.
Ours: on-policy verified pairs (correct ≻ wrong in one group, up to
pairs_per_group = 2), β = 0.1, lr 1e-4 constant, one update per step.

Command:
  python -m rlvr_jax.main --config=experiments/dpo/dpo.py:cpu --workdir=runs/dpo
Measured (one run of `:cpu`, 2026-12-03, commit 93d1f6e, `taskset -c 1` on one core of
this 2-core AMD EPYC VM; 24 DPO steps of 16 prompts x G = 8 on the warm-start arithmetic
base): 2 min wall, 109 CPU s (user + sys, incl. the pipeline's base and final
evaluations). Held-out test split, 64 problems x 16 samples at T = 1: pass@1 43.1 % (base)
-> 54.3 % (after DPO), pass@16 93.8 % -> 95.3 %; training pass rate 0.47 (steps 1-4) ->
0.52 (steps 21-24). The logged `dpo_accuracy` on each step's fresh pairs stays ~0.5
(0.505 first four steps, 0.489 last four) and `dpo_margin` ~0: pairs are drawn from the
current policy, so the margin is measured on responses the update has not seen yet.
One seed, no baseline arm: not a comparison.

Paper scale (`:paper`, `:staged,paper`; rlvr_jax/pipeline/paper.py): Qwen2.5-3B on
Countdown (paper: "Locked at the Entrance"'s model and task, as experiments/ebl/ebl.py;
placeholder path, override via --config.model.path), every stage on the shared paper
block's mesh and precision (rl/paper_scale.py). The DPO update has no micro-batches, so
a step is one pair from each of 32 prompts (2 rows per chip; ours); the staged SFT
samples Qwen2.5-32B (ours: a larger model of the family; override via
--config.stages.sft.run.data.teacher.path). Budgets (ours): DPO 200, SFT 200, RL 300.
Not run.
"""

import json

from rlvr_jax.pipeline import paper
from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config

STEPS = {
    "": dict(dpo=40, sft=200, rl=20),
    "cpu": dict(dpo=24, sft=60, rl=16),
    "pulse": {},
    "paper": dict(dpo=200, sft=200, rl=300),
}
PAPER = dict(
    model="qwen2.5-3b",  # paper ("Locked at the Entrance"): Qwen2.5-3B(-Instruct)
    teacher="Qwen2.5-32B",  # ours: the staged SFT's teacher, a larger model of the family
)


def _train_fields(run, scale: str, domain: str, steps: int) -> None:
    run.task.name = domain
    run.data.group_size = 8  # G
    run.train.steps = steps
    run.checkpoint.every = 4
    if scale == "cpu":
        run.data.prompts_per_step = 16
        run.task.train_size = 4096
        run.eval.num_problems = 64


def get_config(variant: str = ""):
    parts = [p for p in variant.split(",") if p]
    staged = "staged" in parts
    scale = next((p for p in parts if p in STEPS), "")
    if set(parts) - {"staged", *STEPS}:
        raise ValueError(f"variant {variant!r}; want [staged][,cpu|pulse|paper]")
    n = STEPS[scale] or STEPS["cpu"]
    domain = "arithmetic" if scale == "cpu" else "countdown"
    c = pipeline_config()
    c.model.domain = domain
    if staged:
        s = add_stage(c, "sft", "sft")
        s.run.task.name = domain
        s.run.data.source = "teacher"
        s.run.data.num_problems = 512
        s.run.data.teacher_samples = 2
        s.run.train.steps = n["sft"]
        s.run.train.lr = 3e-4
    d = add_stage(c, "dpo", "dpo")
    _train_fields(d.run, scale, domain, n["dpo"])
    d.run.dpo.beta = 0.1  # β
    d.run.dpo.pairs_per_group = 2  # (ours)
    d.run.dpo.loss_type = "sigmoid"
    d.run.optimizer.lr = 1e-4  # (ours)
    if staged:
        _train_fields(add_stage(c, "rl", "rl").run, scale, domain, n["rl"])
    c.eval.num_problems = 64
    c.eval.n_samples = 16
    if scale == "paper":
        paper.apply(c, **PAPER, task=None)  # Countdown, as the paper
        countdown = {"name": domain, "options": {}}  # the task's own options, as the stages'
        c.eval.tasks = json.dumps({domain: countdown})
    if scale == "pulse":
        apply_pulse(c)
        if staged:
            c.stages.sft.run.data.teacher.source = "pretrained"  # no trained teacher here:
            c.stages.sft.run.data.teacher.path = "stage:base"  # the base samples itself
    return c
