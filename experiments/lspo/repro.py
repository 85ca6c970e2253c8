"""Miniature reproduction of LSPO against DAPO (and GRPO, the policy update LSPO wraps).

  python scripts/reproduce.py lspo --seeds 0,1,2 --pin 1

LSPO: all-fail ("cliff") groups get a throw-away LoRA adapter fitted on their
reference solutions, re-rolls with base + adapter, and the successes spliced in
with a truncated importance weight (experiments/lspo/lspo.py).
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

CLIFFS = Metric(
    "cliff groups",
    "rollout/cliff_groups",
    reduce="sum",
    fmt="{:.0f}",
    doc="all-fail groups over the run",
)
RESCUED = Metric(
    "rescued",
    "rollout/scaffold_groups",
    reduce="sum",
    fmt="{:.0f}",
    doc="groups that received spliced scaffold successes over the run",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="lspo",
        paper="LoRA Scaffolded Policy Optimization (LSPO)",
        arms=(
            Arm(
                "lspo",
                "lspo/lspo.py",
                note="rank-8 adapter, 8 Adam steps on the cliff prompts' solutions, G "
                "re-rolls, ≤ G/2 successes spliced with a truncated sequence weight (cap 2)",
            ),
            Arm("dapo", "baselines/dapo.py", role="baseline", note="DAPO (docs/baselines.md)"),
            GRPO,
        ),
        baseline="dapo",
        metrics=(PASS_1, pass_at(8), CLIFFS, RESCUED),
        claims=(
            Claim(
                "LSPO beats DAPO",
                "pass@1",
                "lspo",
                "dapo",
                "higher",
                paper="+3.8 points averaged over 16 cells",
            ),
            Claim("LSPO beats GRPO, the update it wraps", "pass@1", "lspo", "grpo", "higher"),
        ),
        shrunk=shrunk(extra="Qwen models on math in the paper."),
        common=COMMON,
        tuning=TUNING,
        notes="Our LSPO wraps GRPO's update (no DAPO dynamic sampling or clip-higher), as its "
        "config does; the paper builds on DAPO.",
    )
