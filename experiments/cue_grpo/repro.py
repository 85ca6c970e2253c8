"""Miniature reproduction of Cue-GRPO: rarity-weighted positive credit vs GRPO, at pass@k.

python scripts/reproduce.py cue_grpo --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import STEP_SECONDS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cue_grpo",
        paper="When Correct Solutions Repeat: Rarity-Aware Credit Redistribution (Cue-GRPO)",
        arms=(
            Arm(
                "cue",
                "cue_grpo/cue_grpo.py",
                note="positive advantages ∝ cluster size^−1 "
                "over entrance-family cues, positive mass kept",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(pass_at(8), PASS_1, STEP_SECONDS),
        claims=(
            Claim(
                "Cue-GRPO improves repeated-sampling performance (pass@k)",
                "pass@8",
                "cue",
                "grpo",
                "higher",
                paper="largest gains at high sampling budgets",
            ),
            Claim(
                "with small overhead (at most the paper's +6% step time; a loaded machine's "
                "step times)",
                "step s",
                "cue",
                "grpo",
                "at_most",
                paper="+6% wall clock",
                margin=0.06,
                relative=True,
            ),
        ),
        shrunk=shrunk(
            extra="k = 8 is our largest sampling budget (AIME pass@k up to large k in the paper)."
        ),
        common=COMMON,
        tuning=TUNING,
    )
