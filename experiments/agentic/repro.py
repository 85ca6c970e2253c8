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

# The miniature (see `shrunk`): a quarter of the file's RL episodes, two evaluations.
SHRUNK = {
    "train.steps": 10,
    "data.prompts_per_step": 16,
    "eval.every": 0,
    "eval.num_problems": 64,
}

TURNS = Metric(
    "turns",
    "rollout/turns",
    reduce="mean",
    fmt="{:.2f}",
    doc="mean model turns per training episode",
)


# GRPO on tool_lookup episodes (shared with the GRSD page, which compares with it).
GRPO_TOOL = Arm(
    "grpo",
    "agentic/tool_lookup.py",
    role="baseline",
    note="GRPO (G = 8, PPO clip ε = 0.2) on whole tool_lookup episodes from the "
    "warm-start tool_lookup base; environment tokens masked out of the loss",
)
SHRUNK_TEXT = (
    "a 0.92M-parameter tool_lookup base (docs/base_models.md). The experiment "
    "file's 20 steps of 32 episodes × 8 are halved twice (10 steps of 16 × 8) and "
    "evaluation (whole episodes) runs before and after RL only, on the first 64 held-out "
    "problems × 8 samples (the base's 0.336 was measured on 128): an episode costs "
    "several Countdown replies, and the machine gave a pinned run ~20-40% of a core."
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="agentic",
        paper="GRPO on multi-turn tool_lookup episodes (rollout multi_turn)",
        arms=(GRPO_TOOL,),
        baseline="grpo",
        common=SHRUNK,
        metrics=(PASS_1_BEFORE, PASS_1, GAIN, pass_at(8), TURNS, STEP_SECONDS),
        claims=(),
        shrunk=SHRUNK_TEXT,
        tuning=TUNING,
    )
