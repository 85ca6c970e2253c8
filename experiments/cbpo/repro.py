"""Miniature reproduction of CBPO against GRPO (held-out pass@1 at the same rollout budget).

  python scripts/reproduce.py cbpo --seeds 0,1,2 --pin 1

Both arms generate G = 8 rows per prompt: CBPO's are 2 roots and their
branches from entropy-screened positions, GRPO's 8 independent samples.
The "@tool" arms branch inside model turns of multi-turn tool_lookup episodes
(cbpo.py:tool_lookup) against the agentic page's GRPO runs
(experiments/agentic/repro.py), in that page's miniature (its SHRUNK).
cbpo_zero_sum (issue 31): the same CBPO with each group's credit renormalised to sum
to zero after the CBV rescaling, signs kept (credit.cbpo.zero_sum; the paper's
description only asks that the rescaling keep signs):

  python scripts/reproduce.py cbpo --seeds 0,1,2 --arms cbpo,cbpo_zero_sum,grpo
"""

import dataclasses
from pathlib import Path

from rlvr_jax import pyfile
from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import TOKENS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

_agentic = pyfile.load(Path(__file__).parents[1] / "agentic" / "repro.py", "_repro_agentic_arms")
# The tool arms override the page's COMMON with the agentic miniature, so the GRPO arm
# resolves to the agentic page's config (the same runs).
GRPO_TOOL = dataclasses.replace(
    _agentic.GRPO_TOOL, name="grpo@tool", overrides=_agentic.SHRUNK, baseline="grpo@tool"
)

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
            Arm(
                "cbpo_zero_sum",
                "cbpo/cbpo.py",
                {"credit.cbpo.zero_sum": True},
                role="ablation",
                note="CBPO with each group's positive and negative credit rescaled to equal "
                "mass after the CBV factors (group sum 0, signs kept; ours)",
            ),
            Arm(
                "cbpo@tool",
                "cbpo/cbpo.py:tool_lookup",
                dict(_agentic.SHRUNK),
                note="the same branching inside model turns of tool_lookup episodes "
                "(environment tokens never branch points)",
                baseline="grpo@tool",
            ),
            GRPO_TOOL,
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
                exercised="node CBV",
            ),
            Claim(
                "CBPO beats policy-optimization baselines (credit renormalised to sum to 0)",
                "pass@1",
                "cbpo_zero_sum",
                "grpo",
                "higher",
                exercised="node CBV",
            ),
            Claim(
                "CBPO beats policy-optimization baselines (tool_lookup episodes)",
                "pass@1",
                "cbpo@tool",
                "grpo@tool",
                "higher",
                exercised="node CBV",
            ),
        ),
        shrunk=shrunk(
            extra="Single-turn Countdown arms as the other pages; the @tool arms on tool_lookup "
            "episodes with the agentic page's miniature (10 steps of 16 prompts, 64 test "
            "problems). The paper's search benchmarks are not built."
        ),
        common=COMMON,
        tuning=TUNING,
    )
