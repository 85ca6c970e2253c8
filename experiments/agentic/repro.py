"""GRPO on multi-turn tool_lookup episodes against its warm-start base (docs/baselines.md).

  python scripts/reproduce.py agentic --seeds 0,1,2 --pin 1

Not a seed paper: the rollout-stage issue's measurement that RL through the
multi-turn rollout raises held-out pass@1 of the tool_lookup base (0.336 in
docs/base_models.md). The base is each run's step-0 evaluation ("pass@1
before"); the gain is the final minus the step-0 pass@1 of the same run.
"""

from rlvr_jax.repro import PASS_1, Arm, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import GAIN, PASS_1_BEFORE, STEP_SECONDS
from rlvr_jax.repro.miniature import TUNING

TURNS = Metric(
    "turns",
    "rollout/turns",
    reduce="mean",
    fmt="{:.2f}",
    doc="mean model turns per training episode",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="agentic",
        paper="GRPO on multi-turn tool_lookup episodes (rollout multi_turn)",
        arms=(
            Arm(
                "grpo",
                "agentic/tool_lookup.py",
                role="baseline",
                note="GRPO (G = 8, PPO clip ε = 0.2) on whole tool_lookup episodes from the "
                "warm-start tool_lookup base; environment tokens masked out of the loss",
            ),
        ),
        baseline="grpo",
        metrics=(PASS_1_BEFORE, PASS_1, GAIN, pass_at(8), TURNS, STEP_SECONDS),
        claims=(),
        shrunk="a 0.92M-parameter tool_lookup base (docs/base_models.md); 20 RL steps of "
        "32 episodes × 8; ≤ 32 new tokens per model turn; evaluation (whole episodes) at "
        "steps 0, 10 and 20 on the 128 held-out problems × 8 samples that measured the "
        "base's 0.336 (the experiment file's evaluation; episodes cost ~10× a Countdown "
        "reply, so the denser evaluation of the other pages is left out).",
        tuning=TUNING,
    )
