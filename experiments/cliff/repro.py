"""Miniature reproduction of Cliff against GRPO and OPD on the arithmetic task.

  python scripts/reproduce.py cliff --seeds 0,1,2

The locator is the task's exact step verifier (the paper's is an LLM judge).
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO_ARITHMETIC, OPD, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cliff",
        paper="Cliff: Learning Process Rewards from the First Mistake",
        arms=(
            Arm(
                "cliff",
                "cliff/cliff.py",
                note="prefix before the first wrong step +|A_i|, "
                "the rest −|A_i|, on wrong rollouts",
            ),
            GRPO_ARITHMETIC,
            Arm(
                "opd",
                "opdvr/opdvr.py:arithmetic",
                OPD.overrides,
                "baseline",
                "on-policy distillation from the warm-start arithmetic teacher",
            ),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "Cliff outperforms standard GRPO", "pass@1", "cliff", "grpo", "higher", paper="+7%"
            ),
            Claim(
                "Cliff outperforms on-policy distillation",
                "pass@1",
                "cliff",
                "opd",
                "higher",
                paper="+15%",
            ),
        ),
        shrunk=shrunk(
            "multi-step arithmetic",
            "The first mistake comes from the exact step "
            "verifier, not an LLM judge (the judge locator is open work).",
        ),
        common=COMMON,
        tuning=TUNING,
    )
