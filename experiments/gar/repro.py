"""Miniature reproduction of GAR against GRPO (held-out accuracy, and the step-time overhead).

python scripts/reproduce.py gar --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import STEP_SECONDS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="gar",
        paper="Gradient-Aligned Rewards (GAR)",
        arms=(
            Arm(
                "gar",
                "gar/gar.py",
                note="dense reward from the cosine of output-projection "
                "gradient signatures with the expert solution's",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), STEP_SECONDS),
        claims=(
            Claim(
                "GAR improves over GRPO",
                "pass@1",
                "gar",
                "grpo",
                "higher",
                paper="consistent gains on competition math",
            ),
            Claim(
                "GAR's wall-clock overhead is under the paper's 9% (our step times come "
                "from a shared, loaded machine)",
                "step s",
                "gar",
                "grpo",
                "at_most",
                paper="< +9% wall clock",
                margin=0.09,
                relative=True,
            ),
        ),
        shrunk=shrunk(
            extra="Qwen3-4B/8B in the paper. The expert anchor is the task's reference step trace."
        ),
        common=COMMON,
        tuning=TUNING,
    )
