"""Miniature reproduction of H²SD against GRPO and OPSD.

python scripts/reproduce.py h2sd --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO_PRIVILEGED, OPSD, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="h2sd",
        paper="H²SD: Hybrid Hindsight Self-Distillation",
        arms=(
            Arm(
                "h2sd",
                "h2sd/h2sd.py",
                note="successes: magnitude modulation by the "
                "rephrasing view; failures: reverse KL to the hinted self-teacher",
            ),
            GRPO_PRIVILEGED,
            OPSD,
            Arm(
                "rlsd",
                "h2sd/rlsd.py",
                role="baseline",
                note="RLSD: the self-teacher (reference-solution view) rescales every "
                "token's GRPO advantage, magnitude only, no reverse KL",
            ),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim("H²SD outperforms RLVR (GRPO)", "pass@1", "h2sd", "grpo", "higher"),
            Claim("H²SD outperforms OPSD", "pass@1", "h2sd", "opsd", "higher"),
            Claim("H²SD outperforms RLSD", "pass@1", "h2sd", "rlsd", "higher"),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
