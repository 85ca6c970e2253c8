"""Miniature reproduction of SAF-OPD against fixed-coefficient GRPO+OPD fusion.

python scripts/reproduce.py saf_opd --seeds 0,1,2
"""

from rlvr_jax.repro import ENTROPY, PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRAD_RATIO, GRPO, GRPO_OPD, SWEPT, dense_sweep, shrunk

FINAL_ENTROPY = Metric(
    "final entropy",
    "entropy",
    reduce="last",
    fmt="{:.3f}",
    doc="token entropy of the last step's rollouts",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="saf_opd",
        paper="SAF-OPD: Stable Advantage Fusion for On-Policy Distillation",
        arms=(
            Arm(
                "saf",
                "saf_opd/saf_opd.py",
                {"log.grad_split": True},
                note="sparsify (top 20%), tanh-compress to the "
                "RLVR scale, warm-up / hold / anneal the OPD weight",
            ),
            GRPO_OPD,
            GRPO,
        ),
        baseline="grpo+opd",
        metrics=(PASS_1, pass_at(8), ENTROPY, FINAL_ENTROPY, GRAD_RATIO),
        claims=(
            Claim(
                "SAF outperforms fixed-coefficient GRPO+OPD fusion",
                "pass@1",
                "saf",
                "grpo+opd",
                "higher",
                paper="+0.51 to +2.70",
                exercised="dense/outcome",
            ),
            Claim(
                "SAF avoids the entropy collapse of fixed fusion",
                "final entropy",
                "saf",
                "grpo+opd",
                "higher",
            ),
        ),
        shrunk=shrunk(extra="The schedule is fitted to 20 steps (2 warm-up, 6 hold, 12 anneal)."),
        common=COMMON,
        tuning=SWEPT,
        sweeps=(
            dense_sweep("saf", "credit.saf_opd.w_max"),
            dense_sweep("grpo+opd", "credit.saf_opd.w_max"),
        ),
    )
