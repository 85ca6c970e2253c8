"""Miniature reproduction of CPO against entropy-based advantage shaping and GRPO.

  python scripts/reproduce.py cpo --seeds 0,1,2

The ablations are the abstract's balance analysis: the shaping term on correct
rollouts only and on wrong rollouts only.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRAD_RATIO, GRPO_PRIVILEGED, SWEPT, dense_sweep, shrunk

SPLIT = {"log.grad_split": True}  # the shaping term's gradient norm over the outcome's, per step


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cpo",
        paper="Beyond Entropy: Contrastive Policy Optimization (CPO)",
        arms=(
            Arm(
                "cpo",
                "cpo/cpo.py",
                SPLIT,
                note="A'_t = A_t + λ_c·tanh(ℓ^G − ℓ^S), one λ on both sides (swept)",
            ),
            Arm(
                "entropy",
                "cpo/entropy_shaping.py",
                {"model.role": "privileged", **SPLIT},  # the CPO arms' policy
                role="baseline",
                note="entropy-based advantage shaping (κ = 2, α swept)",
            ),
            GRPO_PRIVILEGED,
            Arm(
                "correct-only",
                "cpo/cpo.py:correct_only",
                SPLIT,
                "ablation",
                "the shaping term on correct rollouts only (λ_correct swept)",
            ),
            Arm(
                "wrong-only",
                "cpo/cpo.py:wrong_only",
                SPLIT,
                "ablation",
                "the shaping term on wrong rollouts only (λ_wrong swept)",
            ),
        ),
        baseline="entropy",
        metrics=(PASS_1, pass_at(8), GRAD_RATIO),
        claims=(
            Claim(
                "CPO substantially outperforms entropy-based shaping",
                "pass@1",
                "cpo",
                "entropy",
                "higher",
            ),
            Claim(
                "balancing correct and wrong rollouts beats correct-only",
                "pass@1",
                "cpo",
                "correct-only",
                "higher",
            ),
            Claim("balancing beats wrong-only", "pass@1", "cpo", "wrong-only", "higher"),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=SWEPT,
        sweeps=(
            dense_sweep("cpo", "credit.cpo.lam_correct,credit.cpo.lam_wrong"),
            dense_sweep("entropy", "credit.entropy_shaping.alpha"),
            dense_sweep("correct-only", "credit.cpo.lam_correct"),
            dense_sweep("wrong-only", "credit.cpo.lam_wrong"),
        ),
    )
