"""The baselines table (docs/baselines.md) through the harness: seven baselines, three seeds.

python scripts/reproduce.py baselines --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, ROLLOUTS, Arm, Reproduction, pass_at
from rlvr_jax.repro.metrics import PASS_1_BEFORE, STEP_SECONDS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, as_role, shrunk

NAMES = ("dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="baselines",
        paper="The baselines every seed paper compares with",
        arms=(
            as_role(GRPO, "baseline"),
            *(Arm(n, f"baselines/{n}.py", role="baseline") for n in NAMES),
        ),
        baseline="grpo",
        metrics=(PASS_1_BEFORE, PASS_1, pass_at(8), ROLLOUTS, STEP_SECONDS),
        claims=(),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
