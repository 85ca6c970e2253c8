"""Miniature reproduction of OPDVR against standard OPD (and GRPO for reference).

python scripts/reproduce.py opdvr --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, OPD, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="opdvr",
        paper="On-policy Distillation with Verifiable Reward (OPDVR)",
        arms=(
            Arm(
                "opdvr",
                "opdvr/opdvr.py",
                note="OPD reward gated by the verdict: correct "
                "rollouts max(0, r_t), wrong ones min(0, r_t)",
            ),
            OPD,
            Arm(
                "inverted",
                "opdvr/opdvr.py",
                {"credit.opdvr.gate": "inverted"},
                "ablation",
                "the inverted gate",
            ),
            GRPO,
        ),
        baseline="opd",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "OPDVR consistently outperforms standard OPD",
                "pass@1",
                "opdvr",
                "opd",
                "higher",
                paper="better on six benchmarks",
            ),
            Claim(
                "the gate's direction matters: the inverted gate is worse",
                "pass@1",
                "inverted",
                "opdvr",
                "lower",
            ),
        ),
        shrunk=shrunk(
            extra="Teacher: the warm-start Countdown teacher (same tokenizer, ~2x "
            "the base's SFT steps)."
        ),
        common=COMMON,
        tuning=TUNING,
    )
