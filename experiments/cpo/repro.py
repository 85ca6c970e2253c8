"""Miniature reproduction of CPO against entropy-based advantage shaping and GRPO.

  python scripts/reproduce.py cpo --seeds 0,1,2

The ablations are the abstract's balance analysis: the shaping term on correct
rollouts only and on wrong rollouts only.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO_PRIVILEGED, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cpo",
        paper="Beyond Entropy: Contrastive Policy Optimization (CPO)",
        arms=(
            Arm("cpo", "cpo/cpo.py", note="A'_t = A_t + λ_c·tanh(ℓ^G − ℓ^S), λ = 0.1 both sides"),
            Arm(
                "entropy",
                "cpo/entropy_shaping.py",
                {"model.role": "privileged"},  # the CPO arms' policy
                role="baseline",
                note="entropy-based advantage shaping (α = 0.4, κ = 2)",
            ),
            GRPO_PRIVILEGED,
            Arm(
                "correct-only",
                "cpo/cpo.py:correct_only",
                {},
                "ablation",
                "the shaping term on correct rollouts only",
            ),
            Arm(
                "wrong-only",
                "cpo/cpo.py:wrong_only",
                {},
                "ablation",
                "the shaping term on wrong rollouts only",
            ),
        ),
        baseline="entropy",
        metrics=(PASS_1, pass_at(8)),
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
        tuning=TUNING,
    )
