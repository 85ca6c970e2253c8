"""Miniature reproduction of PAIR's headline: accuracy at about half of full-group GRPO's tokens.

  python scripts/reproduce.py pair --seeds 0,1,2

Arms: PAIR (prefixes, then a convex design of continuations, pair-inclusion
weighted RLOO), full-group GRPO (the token baseline) and VIGOR, our pointwise
allocator (declared before any run; the paper compares with its strongest one).
"""

from rlvr_jax.repro import PASS_1, TOKENS, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, VIGOR, as_role, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="pair",
        paper="PAIR: Pairwise-Aware Inclusion Reweighting for Adaptive Rollout Allocation",
        arms=(
            Arm(
                "pair",
                "pair/pair.py",
                note="16-token prefixes of 8 candidates, 0.4 suffix "
                "budget, pair-inclusion-weighted RLOO",
            ),
            GRPO,
            as_role(VIGOR, "baseline"),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), TOKENS),
        claims=(
            Claim(
                "PAIR generates about half the tokens of full-group GRPO",
                "tokens",
                "pair",
                "grpo",
                "lower",
                paper="−51% tokens",
            ),
            Claim(
                "PAIR is more accurate than the strongest pointwise allocator",
                "pass@1",
                "pair",
                "vigor",
                "higher",
                paper="+1.2 points",
            ),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
        notes="GRPO's tokens are its response lengths × 256 rollouts per step; PAIR's are "
        "its prefixes plus the continued suffixes (select/tokens).",
    )
