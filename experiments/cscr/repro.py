"""Miniature reproduction of CSCR against GRPO at the same number of updates.

python scripts/reproduce.py cscr --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO_PRIVILEGED, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cscr",
        paper="Counterfactual Sensitivity Credit Reallocation (CSCR)",
        arms=(
            Arm(
                "cscr",
                "cscr/cscr.py",
                note="w_t ∝ (1 + s_t)^−1 from the shifts under "
                "'correct' / 'incorrect' contexts, renormalised, signs kept",
            ),
            GRPO_PRIVILEGED,
            Arm(
                "cscr-strong",
                "cscr/cscr.py",
                {"credit.cscr.alpha": 4.0},
                "ablation",
                "stronger modulation, α = 4",
            ),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "CSCR outperforms GRPO with the same number of updates",
                "pass@1",
                "cscr",
                "grpo",
                "higher",
            ),
            Claim(
                "moderate down-weighting beats strong modulation",
                "pass@1",
                "cscr",
                "cscr-strong",
                "higher",
            ),
        ),
        shrunk=shrunk(extra="Long-CoT math in the paper; our responses are ≤ 64 tokens."),
        common=COMMON,
        tuning=TUNING,
    )
