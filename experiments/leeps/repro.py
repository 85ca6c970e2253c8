"""Miniature reproduction of LEEPS's headline: higher accuracy than prompt-selection baselines.

python scripts/reproduce.py leeps --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import EFFECTIVE
from rlvr_jax.repro.miniature import COMMON, DPS, GRPO, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="leeps",
        paper="LEEPS: Latent-Guided Explore-Exploit Prompt Sampling",
        arms=(
            Arm(
                "leeps",
                "leeps/leeps.py",
                note="exploit / explore portfolios split by recent non-trivial ratios",
            ),
            GRPO,
            DPS,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), EFFECTIVE),
        claims=(
            Claim(
                "LEEPS beats uniform prompt sampling",
                "pass@1",
                "leeps",
                "grpo",
                "higher",
                paper="+2.6% / +3.7% relative over the strongest baseline",
            ),
            Claim(
                "LEEPS beats difficulty-prediction selection", "pass@1", "leeps", "dps", "higher"
            ),
            Claim(
                "more informative prompts per rollout than uniform",
                "effective/1k",
                "leeps",
                "grpo",
                "higher",
            ),
        ),
        shrunk=shrunk(extra="Representations: the initial policy's mean final hidden state."),
        common=COMMON,
        tuning=TUNING,
    )
