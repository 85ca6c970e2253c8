"""Miniature reproduction of CBPO against GRPO (held-out pass@1 at the same rollout budget).

  python scripts/reproduce.py cbpo --seeds 0,1,2 --pin 1

Both arms generate G = 8 rows per prompt: CBPO's are 2 roots and their
branches from entropy-screened positions, GRPO's 8 independent samples.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import TOKENS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

CBV = Metric(
    "node CBV",
    "rollout/node_cbv",
    reduce="mean",
    fmt="{:.3f}",
    doc="mean contrastive branch value (reward std of a node's exact-prefix group)",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="cbpo",
        paper="Contrastive Branch Policy Optimization (CBPO)",
        arms=(
            Arm(
                "cbpo",
                "cbpo/cbpo.py",
                note="2 roots + branches at entropy-screened tokens (budget decay α = β = ½), "
                "advantages rescaled by clip(CBV / mean CBV, 0.1, 3), shared prefixes "
                "credited once",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), TOKENS, CBV),
        claims=(
            Claim(
                "CBPO beats policy-optimization baselines",
                "pass@1",
                "cbpo",
                "grpo",
                "higher",
            ),
        ),
        shrunk=shrunk(
            extra="This page's miniature is single-turn Countdown; branching inside model "
            "turns of tool episodes (cbpo.py:tool_lookup) is built but not on this page, and "
            "the paper's search benchmarks are not built."
        ),
        common=COMMON,
        tuning=TUNING,
    )
