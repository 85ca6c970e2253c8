"""Miniature reproduction of RSTG against naive GRPO+OPD.

python scripts/reproduce.py rstg --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRAD_RATIO, GRPO, GRPO_OPD, SWEPT, dense_sweep, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="rstg",
        paper="Distill Where You Fail: Recovering Learning Signals of Negative RL-Groups (RSTG)",
        arms=(
            Arm(
                "rstg",
                "rstg/rstg.py",
                {"log.grad_split": True},
                note="OPD only on all-wrong groups, confidence-weighted, "
                "on high-entropy / high-divergence tokens",
            ),
            GRPO_OPD,
            GRPO,
        ),
        baseline="grpo+opd",
        metrics=(PASS_1, pass_at(8), GRAD_RATIO),
        claims=(
            Claim(
                "RSTG outperforms naive GRPO+OPD",
                "pass@1",
                "rstg",
                "grpo+opd",
                "higher",
                paper="+4.02% (math)",
                exercised="dense/outcome",
            ),
            Claim("and GRPO", "pass@1", "rstg", "grpo", "higher", exercised="dense/outcome"),
        ),
        shrunk=shrunk(extra="Not here: the SFT on the teacher's correct solutions."),
        common=COMMON,
        tuning=SWEPT,
        sweeps=(
            dense_sweep("rstg", "credit.rstg.coef"),
            dense_sweep("grpo+opd", "credit.saf_opd.w_max"),
        ),
    )
