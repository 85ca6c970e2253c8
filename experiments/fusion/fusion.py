"""Consolidating RLVR across domains: Merge, Mix RL and MOPD from shared experts, one table.

Reproduces, in miniature, the three fusion paradigms on two domains (Countdown
and multi-step arithmetic) from one common base, as one pipeline:

  base_sft        the common base θ_0: SFT of the Countdown warm start on the
                  reference solutions of a 50/50 Countdown + arithmetic mixture
  rl_countdown    GRPO specialist on Countdown, from θ_0
  rl_arithmetic   GRPO specialist on arithmetic, from θ_0
  merge_sum       Merge: task arithmetic θ_0 + Σ_d λ_d (θ_d − θ_0), λ = (1, 1)
  merge_avg       the same with λ = (0.5, 0.5) (weight averaging)
  mix             Mix RL: GRPO on the pooled mixture (proportions 0.5 / 0.5),
                  as many steps as both specialists together
  mopd            MOPD: on-policy distillation on the mixture, each prompt's
                  response scored by its domain's specialist (score signal
                  "mopd"), plain OPD advantage ℓ^T − ℓ^S
The pipeline evaluates every checkpoint on both domains (held-out pass@1 and
pass@8); results.md holds the domains x {base, θ_0, each specialist, merges,
mix, MOPD} table, also written by `python scripts/fusion_table.py <workdir>`.
More merge methods (e.g. ISO-Merger) are more merge stages (`pipeline.merge.MERGES`).

Paper-fixed (abstract): the three paradigms reusing the same experts and data;
Merge combines task vectors, Mix RL pools data with domain proportions, MOPD
routes each prompt to its domain's expert teacher; a multi-domain table.
Ours: two synthetic domains; θ_0 made by SFT on the pooled reference solutions
(the warm starts of different domains do not share a base); λ values; equal
proportions; step budgets (below); MOPD's per-token reward = sampled-token OPD.

Command:
  python -m rlvr_jax.main --config=experiments/fusion/fusion.py:cpu --workdir=runs/fusion
Variants: "" (larger budgets), `:cpu` (the measured run), `:pulse` (CI: tiny
random model, 2 steps per stage), `:paper` (below).

Paper scale (`:paper`, rlvr_jax/pipeline/paper.py): Qwen3-8B (ours: the abstract names
no model; placeholder path, override via --config.model.path), θ_0's SFT and every RL /
MOPD stage on the shared paper block's mesh and precision (rl/paper_scale.py), on the
two synthetic domains above (ours: the paper's domains are not in the abstract);
budgets (ours): θ_0 1000 SFT steps, specialists 250 steps each, Mix RL and MOPD 500.
The merges run on the host one tensor at a time (pipeline/merge.py). Not run.

Measured (`:cpu`, one run, seed 0, 2026-12-03): 12.6 CPU-minutes (632 s user +
126 s system), 1 h 12 min wall pinned to one core of this 2-core CPU shared at a
load of 15-30; base = the Countdown warm start (countdown-base-d12021bd41c8).
θ_0 = 300 SFT steps; specialists 20 GRPO steps each (16 prompts x 8); Mix RL and
MOPD 40 steps. Held-out pass@1 / pass@8 (%), 64 test problems per domain x 8
samples (one seed: ±4 points of sampling error on pass@1):

  model                countdown     arithmetic    mean pass@1
  warm start (base)    23.8 / 64.1    0.0 /  0.0   11.9
  θ_0 (base_sft)       21.5 / 59.4   28.9 / 87.5   25.2
  rl_countdown         36.1 / 51.6   26.2 / 76.6   31.2
  rl_arithmetic        21.5 / 57.8   25.8 / 78.1   23.6
  merge_sum  λ=(1,1)   34.6 / 53.1   19.9 / 62.5   27.2
  merge_avg  λ=(.5,.5) 32.4 / 57.8   27.7 / 79.7   30.1
  mix                  35.5 / 59.4   24.2 / 62.5   29.9
  mopd                 33.8 / 54.7   25.4 / 70.3   29.6

The Countdown specialist gained 14.6 points of pass@1; the arithmetic one moved
nothing measurable in 20 steps. Merge (averaged), Mix RL and MOPD keep most of the
Countdown gain and end within 0.5 points of each other in mean pass@1; summing
both task vectors (λ = (1, 1)) costs 9 points of arithmetic (interference). As in
the paper, no paradigm raised pass@8 over θ_0.
The reproduction harness's run of the same variant and seed on 2026-12-04
(docs/reproductions/fusion.md, 804 CPU s) did not repeat the closeness: mean pass@1
MOPD 28.5, merge_avg 29.8, merge_sum 28.1, Mix RL 23.8, θ_0 24.6 (one seed each: the
spread between runs of one config is not known yet).
"""

import json

from rlvr_jax.pipeline import paper
from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config
from rlvr_jax.train.warmstart import TASK_OPTIONS

DOMAINS = ("countdown", "arithmetic")
STEPS = {
    "": dict(sft=600, specialist=40, problems=128, prompts=32),
    "cpu": dict(sft=300, specialist=20, problems=64, prompts=16),
    "pulse": dict(sft=2, specialist=2, problems=4, prompts=4),
    "paper": dict(sft=1000, specialist=250, problems=500, prompts=512),
}
PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def _task(run, name: str) -> None:
    run.task.name = name
    options = {d: TASK_OPTIONS[d] for d in DOMAINS}
    if name == "mixture":
        mix = dict(domains=list(DOMAINS), proportions=[0.5, 0.5], domain_options=options)
        run.task.options = json.dumps(mix, sort_keys=True)
    else:
        run.task.options = json.dumps(options[name], sort_keys=True)


def _rl(c, name: str, kind: str, task: str, steps: int, n: dict):
    s = add_stage(c, name, kind, init="base_sft")
    _task(s.run, task)
    s.run.data.prompts_per_step = n["prompts"]
    s.run.data.group_size = 8  # G
    s.run.task.train_size = 8192
    s.run.train.steps = steps
    s.run.eval.num_problems = n["problems"]
    s.run.checkpoint.every = 5
    return s


def get_config(variant: str = ""):
    if variant not in STEPS:
        raise ValueError(f"variant {variant!r}; valid: {sorted(STEPS)}")
    n = STEPS[variant]
    c = pipeline_config()
    c.model.domain = "countdown"  # the warm start θ_0 is fine-tuned from
    base = add_stage(c, "base_sft", "sft")
    _task(base.run, "mixture")
    base.run.data.source = "reference"
    base.run.data.num_problems = 8000
    base.run.train.steps = n["sft"]
    base.run.train.lr = 1e-3
    k = n["specialist"]
    for d in DOMAINS:
        _rl(c, f"rl_{d}", "rl", d, k, n)
    for name, lambdas in (("merge_sum", "1,1"), ("merge_avg", "0.5,0.5")):
        m = add_stage(c, name, "merge", init="base_sft")
        m.run.method = "task_arithmetic"
        m.run.specialists = ",".join(f"rl_{d}" for d in DOMAINS)
        m.run.lambdas = lambdas  # λ per domain (ours)
    _rl(c, "mix", "rl", "mixture", k * len(DOMAINS), n)
    mopd = _rl(c, "mopd", "opd", "mixture", k * len(DOMAINS), n)
    mopd.run.score.signals = "mopd"  # each row's teacher = its domain's specialist
    mopd.run.score.mopd.teachers = json.dumps({d: {"path": f"stage:rl_{d}"} for d in DOMAINS})
    c.eval.tasks = json.dumps(
        {d: {"name": d, "options": TASK_OPTIONS[d]} for d in DOMAINS}, sort_keys=True
    )
    c.eval.num_problems = n["problems"]
    c.eval.n_samples = 8
    if variant == "paper":
        paper.apply(c, **PAPER, task=None)  # the two domains stay (ours)
    if variant == "pulse":
        apply_pulse(c)
        for name in c.stages:  # apply_pulse moved every stage to arithmetic
            s = c.stages[name]
            if s.kind != "merge":
                task = "mixture" if name in ("base_sft", "mix", "mopd") else name[3:]
                _task(s.run, task)
        c.eval.tasks = json.dumps({d: {"name": d, "options": TASK_OPTIONS[d]} for d in DOMAINS})
    return c
