"""Miniature reproduction of ISO: GRPO with ISO-AdamW against GRPO with AdamW.

  python scripts/reproduce.py iso --seeds 0,1,2 --pin 1

The paper's claim is about steps to a given accuracy; at our 20 steps the page
compares the accuracy both optimizers reach in the same steps (and the curves).
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="iso",
        paper="ISO: An RLVR-Native Optimization Stack (isospectral optimization)",
        arms=(
            Arm(
                "iso",
                "iso/iso.py",
                note="GRPO whose projections keep their singular values; AdamW on the "
                "singular frames with a QR retraction",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "ISO-AdamW reaches AdamW's accuracy in fewer steps (here: higher pass@1 "
                "after the same 20 steps)",
                "pass@1",
                "iso",
                "grpo",
                "higher",
            ),
        ),
        shrunk=shrunk(extra="Larger models and longer runs in the paper."),
        common=COMMON,
        tuning=TUNING,
    )
