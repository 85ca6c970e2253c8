"""Difficulty-prediction sampling (DPS) against uniform prompts: the select-stage reference.

  python scripts/reproduce.py difficulty --seeds 0,1,2

Not a seed paper: DPS is the baseline of SARA and graph difficulty. Its premise
(prompts predicted near 50% success give more groups with reward variance, so
more gradient per rollout) is checked here through the trainer.
"""

from rlvr_jax.repro import PASS_1, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import EFFECTIVE
from rlvr_jax.repro.miniature import COMMON, DPS, GRPO, TUNING, as_role, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="difficulty",
        paper="Difficulty-prediction sampling (baseline of SARA and graph difficulty)",
        arms=(as_role(DPS, "method"), GRPO),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), EFFECTIVE),
        claims=(
            Claim(
                "prompts picked near 50% predicted success yield more effective groups "
                "per rollout than uniform prompts",
                "effective/1k",
                "dps",
                "grpo",
                "higher",
            ),
            Claim("and a higher held-out pass@1", "pass@1", "dps", "grpo", "higher"),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
