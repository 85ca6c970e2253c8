"""Miniature reproduction of "Sequential beats joint": OPD then RL vs pure OPD, pure RL, joint.

  python scripts/reproduce.py seq_opd_rl --seeds 0,1,2 --pin 1

Every arm is a pipeline of experiments/seq_opd_rl/pipeline.py at its `cpu` scale
(warm-start arithmetic base and teacher): sequential = OPD (plateau switch on the
validation split, ≤ 20 steps) then GRPO (16 steps); the one-stage arms train 36
steps (the sequential arm's cap), so no arm trains longer than another; sft_rl is
the SFT cold start (60 steps on the teacher's verified samples) then the same RL.
An arm's value is the held-out evaluation of its pipeline's last export.

The additive joint arm's weight w of the OPD term is chosen on the validation
split (0.03 / 0.1 / 0.3 / 1 at seed 0): at w = 1 the dense term can dominate the
outcome term's gradient, which would make the arm pure OPD. The rescaling arm
adds no term (it multiplies A_i by a factor clipped to [0.5, 2]) and the other
arms have no coefficient that weighs a dense term against the outcome.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import GAIN, PASS_1_BEFORE
from rlvr_jax.repro.miniature import GRAD_RATIO, SWEPT, dense_sweep

PIPE = "seq_opd_rl/pipeline.py:{},cpu"
# The joint arms log their dense term's gradient norm over the outcome term's per step.
SPLIT = "stages.{}.run.log.grad_split"
SWITCH = Metric(
    "OPD steps",
    "opd",
    reduce="stage_steps",
    fmt="{:.1f}",
    doc="steps the sequential arm's OPD stage ran before its plateau switch to RL (cap 20; "
    "0 for the arms without that stage)",
)


def get_reproduction() -> Reproduction:
    claims = [
        Claim(
            f"OPD-then-RL beats {what}",
            "pass@1",
            "sequential",
            arm,
            "higher",
        )
        for arm, what in (
            ("rl", "pure RLVR"),
            ("opd", "pure OPD"),
            ("joint_additive", "joint fusion (additive)"),
            ("joint_rescale", "joint fusion (rescaling)"),
            ("sft_rl", "an SFT cold start before RL"),
        )
    ]
    return Reproduction(
        slug="seq_opd_rl",
        paper="Sequential Beats Joint: on-policy distillation then RLVR",
        arms=(
            Arm(
                "sequential",
                PIPE.format("sequential"),
                note="OPD (A_t = ℓ^T − ℓ^S), switched to GRPO when validation pass@1 "
                "gains ≤ 0.01 over 2 evaluations (or at 20 steps)",
            ),
            Arm("rl", PIPE.format("rl"), role="baseline", note="GRPO alone, 36 steps"),
            Arm("opd", PIPE.format("opd"), role="baseline", note="OPD alone, 36 steps"),
            Arm(
                "joint_additive",
                PIPE.format("joint_additive"),
                {SPLIT.format("joint_additive"): True},
                role="baseline",
                note="one RL stage, A_t = A_i + w·(ℓ^T − ℓ^S), w swept, 36 steps",
            ),
            Arm(
                "joint_rescale",
                PIPE.format("joint_rescale"),
                {SPLIT.format("joint_rescale"): True},
                role="baseline",
                note="one RL stage, A_t = A_i·clip(exp(ℓ^T − ℓ^S), 0.5, 2), 36 steps",
            ),
            Arm(
                "sft_rl",
                PIPE.format("sft_rl"),
                role="baseline",
                note="SFT on the teacher's verified samples, then GRPO (16 steps)",
            ),
        ),
        baseline="rl",
        metrics=(PASS_1_BEFORE, PASS_1, GAIN, pass_at(8), pass_at(64), SWITCH, GRAD_RATIO),
        claims=tuple(claims),
        shrunk=(
            "a 0.92M-parameter policy and its warm-start teacher SFT-trained from scratch on "
            "synthetic multi-step arithmetic (docs/base_models.md) in place of the paper's "
            "LLMs; at most 36 training steps of 16 prompts × 8 rollouts per arm; evaluation "
            "of each export on 64 held-out problems × 64 samples (pass@k for k = 1..64)."
        ),
        tuning=SWEPT,
        sweeps=(
            dense_sweep("joint_additive", "stages.joint_additive.run.credit.opd_additive.weight"),
        ),
        notes="The plateau rule (δ = 0.01 over k = 2 validation evaluations) and the step "
        "budgets are ours, fixed in pipeline.py before any run here.",
    )
