"""Miniature reproduction of DASH against matched vanilla on-policy self-distillation (OPSD).

python scripts/reproduce.py dash --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO_PRIVILEGED, OPSD, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="dash",
        paper="DASH: Divergence-Adaptive Supervision Horizons for On-Policy Self-Distillation",
        arms=(
            Arm(
                "dash",
                "dash/dash.py",
                note="gated backward aggregation over adaptive horizons H_t ∈ [1, 8]",
            ),
            OPSD,
            GRPO_PRIVILEGED,
        ),
        baseline="opsd",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "DASH improves over matched vanilla OPSD",
                "pass@1",
                "dash",
                "opsd",
                "higher",
                paper="better on every benchmark at three scales",
            ),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
