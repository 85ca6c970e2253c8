"""Sequential Beats Joint: OPD then RL in one run, against the joint baselines and SFT → RL.

Reproduces, in miniature, the paper's comparison of a two-stage scheme, on-policy
distillation (OPD) then RLVR, with the joint schemes that fuse the OPD token
signal r_t = ℓ^T_t − ℓ^S_t into the RL advantage within one step, and with an
SFT cold start. Every arm is a pipeline (`rlvr_jax.pipeline`): one command, one
workdir; pass@k for k = 1..64 of the base and of each stage's export on held-out
problems, plotted (passk.png) and tabulated (results.md).

Arms (`pipeline.py:<arm>` or `<arm>,<scale>`):
  sequential      opd → rl. The OPD stage ends in-run when its validation pass@1
                  plateaus (no gain > δ over the last k evaluations), at most
                  opd_steps; the RL stage (GRPO) starts from its export.
  joint_additive  one RL stage with A_t = A_i + w·r_t (credit.opd_additive).
  joint_rescale   one RL stage with A_t = A_i·clip(exp(r_t), a, b) (credit.opd_rescale).
  sft_rl          sft on the teacher's verified samples → rl (the cold start the
                  paper finds worse than OPD).
  opd, rl         pure OPD / pure GRPO for the joint arms' steps.
Scales: "" (warm-start Countdown base and teacher), "cpu" (warm-start arithmetic
base and teacher, a smaller batch: the measured run below), "pulse" (CI: a tiny
random model, 2-3 steps per stage, the teacher = the policy under the reference
solution; the switch is forced at its first chance), "paper" (below).

Paper-fixed (abstract): OPD then RL; the two joint baselines; switching on the
OPD validation score; SFT as the cold-start comparison; pass@k curves.
Ours: the switch rule (no gain > δ = 0.01 in pass@1 over k = 2 evaluations on
the validation split; `core.opd.opd_plateaued`); plain sampled-token OPD as the
OPD stage (advantage r_t, no RL term); w = 1, [a, b] = [0.5, 2]; GRPO with token
PPO clip ε = 0.2, G = 8; SFT data = the teacher's correct answers among 2
samples per prompt; step budgets below.

Command (any arm):
  python -m rlvr_jax.main --config=experiments/seq_opd_rl/pipeline.py:sequential,cpu \
      --workdir=runs/seq_opd_rl/sequential
Measured (one run of `sequential,cpu`, 2026-12-03, commit 6b261b5's pipeline code,
`taskset -c 1` on one core of this 2-core AMD EPYC VM): 5 min 4 s wall, 295 CPU s.
OPD validation pass@1 (128 problems x 4) at steps 0/4/8/12/16/20: 44.7, 52.0, 53.1,
55.9, 55.3, 58.8 — never two evaluations without a gain > δ, so the plateau switch did
not fire and OPD ran its 20-step cap; GRPO then ran 16 steps from its export. Held-out
test split, 64 problems x 64 samples at T = 1, pass@1: base 44.0 -> opd 59.8 -> rl 55.5
(pass@64 100 for all three: the k = 1..64 curves in the run's passk.png differ only at
small k). One seed; the joint and SFT arms were not run, so this is no comparison yet.

Paper scale (`<arm>,paper`, rlvr_jax/pipeline/paper.py): Qwen3-8B student, Qwen3-32B
teacher (ours, as seq_opd_rl.py: the abstract names no model; placeholder paths, override
via --config.model.path and each stage's --config.stages.<name>.run.score.teacher.path /
.run.data.teacher.path), every RL / OPD / SFT stage on the shared paper block's mesh and
precision (rl/paper_scale.py); step budgets (ours): OPD cap 200 with the switch evaluated
every 20 steps, RL 300 after OPD or SFT, one-stage arms 500, SFT 200. Not run.
Run: `--config=<file>:sequential,paper --config.model.path=<checkpoint dir>` on the v5p
slice the plan rows name (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.pipeline import paper
from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config

ARMS = ("sequential", "joint_additive", "joint_rescale", "sft_rl", "opd", "rl", "all")
ALL = ("sequential", "joint_additive", "joint_rescale", "sft_rl", "rl")  # the arms of "all"
SCALES = ("", "cpu", "pulse", "paper")
PAPER = dict(
    model="qwen3-8b",  # ours: the abstract names no model (as seq_opd_rl.py)
    teacher="Qwen3-32B",  # ours: a larger model of the student's family
)
# Steps per scale: the OPD stage's cap, the RL stage after OPD/SFT, the one-stage arms
# (= the cap of OPD + RL: no arm trains more steps than another), SFT steps.
STEPS = {
    "": dict(opd=40, rl=40, joint=80, sft=200, eval_every=5),
    "cpu": dict(opd=20, rl=16, joint=36, sft=60, eval_every=4),
    "pulse": dict(opd=3, rl=2, joint=2, sft=2, eval_every=1),
    "paper": dict(opd=200, rl=300, joint=500, sft=200, eval_every=20),
}


def _parse(variant: str) -> tuple[str, str]:
    parts = [p for p in variant.split(",") if p]
    arm = next((p for p in parts if p in ARMS), "sequential")
    scale = next((p for p in parts if p in SCALES), "")
    unknown = [p for p in parts if p not in ARMS + SCALES]
    if unknown or len(parts) > 2:
        raise ValueError(f"variant {variant!r}; want <arm>[,<scale>], arms {ARMS}, scales {SCALES}")
    return arm, scale


def _rl(c, name: str, kind: str, scale: str, steps: int, *, init: str = ""):
    """An RL-kind stage with the fields every arm shares."""
    s = add_stage(c, name, kind, init=init)
    s.run.task.name = c.model.domain
    s.run.data.group_size = 8  # G
    s.run.loss.name = "ppo_clip"  # ε = 0.2
    s.run.train.steps = steps
    s.run.checkpoint.every = 4
    if scale == "cpu":
        s.run.data.prompts_per_step = 16
        s.run.task.train_size = 4096
    return s


def _add_arm(c, arm: str, scale: str) -> None:
    """The stages of one arm, from the base (stage names are unique across arms)."""
    n = STEPS[scale]
    if arm == "sequential":
        s = _rl(c, "opd", "opd", scale, n["opd"], init="base")  # A_t = ℓ^T − ℓ^S alone
        s.run.eval.split = "validation"  # the switch's series
        s.run.eval.at_start = True
        s.run.eval.every = n["eval_every"]
        s.run.eval.num_problems = 128
        s.run.eval.n_samples = 4
        s.switch.metric = "pass@1"
        s.switch.delta = 0.01  # δ (ours)
        s.switch.patience = 2  # k (ours)
        _rl(c, "rl", "rl", scale, n["rl"], init="opd")
    elif arm in ("joint_additive", "joint_rescale"):
        s = _rl(c, arm, "rl", scale, n["joint"], init="base")
        s.run.score.signals = "teacher"  # ℓ^T from the warm-start teacher of the domain
        s.run.score.teacher.source, s.run.score.teacher.role = "warm_start", "teacher"
        s.run.credit.transforms = "opd_additive" if arm == "joint_additive" else "opd_rescale"
        s.run.credit.opd_additive.weight = 1.0  # w (ours)
        s.run.credit.opd_rescale.low = 0.5  # a (ours)
        s.run.credit.opd_rescale.high = 2.0  # b (ours)
    elif arm == "sft_rl":
        s = add_stage(c, "sft", "sft", init="base")
        s.run.task.name = c.model.domain
        s.run.data.source = "teacher"  # the warm-start teacher's verified samples
        s.run.data.num_problems = 512 if scale else 2000
        s.run.data.teacher_samples = 2
        s.run.train.steps = n["sft"]
        s.run.train.lr = 3e-4
        _rl(c, "sft_rl", "rl", scale, n["rl"], init="sft")
    elif arm == "opd":
        _rl(c, "opd_only", "opd", scale, n["joint"], init="base")
    else:
        _rl(c, "rl_only", "rl", scale, n["joint"], init="base")


def get_config(variant: str = ""):
    arm, scale = _parse(variant)
    c = pipeline_config()
    c.model.domain = "arithmetic" if scale == "cpu" else "countdown"
    for a in ALL if arm == "all" else (arm,):
        _add_arm(c, a, scale)
    c.eval.num_problems = 64
    c.eval.n_samples = 64  # pass@k for k = 1..64
    if scale == "paper":
        paper.apply(c, **PAPER)
    if scale == "pulse":
        apply_pulse(c)
        if "opd" in c.stages:
            c.stages.opd.switch.delta = 1.0  # a pulse switches at its first chance
            c.stages.opd.run.eval.at_start = True
            c.stages.opd.run.eval.every = 1
            c.stages.opd.run.train.steps = STEPS["pulse"]["opd"]
        if "sft" in c.stages:
            c.stages.sft.run.data.teacher.source = "pretrained"  # no trained teacher here:
            c.stages.sft.run.data.teacher.path = "stage:base"  # the base samples itself
    return c
