"""Miniature reproduction of LSPO against DAPO (and GRPO, the policy update LSPO wraps).

  python scripts/reproduce.py lspo --seeds 0,1,2 --pin 1

LSPO: all-fail ("cliff") groups get a throw-away LoRA adapter fitted on their
reference solutions, re-rolls with base + adapter, and the successes spliced in
with a truncated importance weight (experiments/lspo/lspo.py).

Like for like: LSPO on DAPO's recipe (`lspo.py:dapo`, the paper's setting) is
compared with DAPO, LSPO on GRPO's with GRPO; the adapter's re-rolls are counted in
each run's rollouts and tokens (select/off_batch_rollouts), so the budget columns
compare every generated rollout.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import ROLLOUTS, TOKENS
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
                "lspo_dapo",
                "lspo/lspo.py:dapo",
                note="LSPO on DAPO's recipe (the paper's): rank-8 adapter, 8 Adam steps on the "
                "cliff prompts' solutions, G re-rolls, ≤ G/2 successes spliced with a truncated "
                "sequence weight (cap 2); clip-higher, token-mean, dynamic sampling",
            ),
            Arm("dapo", "baselines/dapo.py", role="baseline", note="DAPO (docs/baselines.md)"),
            Arm(
                "lspo",
                "lspo/lspo.py",
                baseline="grpo",
                note="LSPO on GRPO's recipe: the same scaffold around GRPO's update",
            ),
            GRPO,
        ),
        baseline="dapo",
        metrics=(PASS_1, pass_at(8), CLIFFS, RESCUED, ROLLOUTS, TOKENS),
        claims=(
            Claim(
                "LSPO beats DAPO",
                "pass@1",
                "lspo_dapo",
                "dapo",
                "higher",
                paper="+3.8 points averaged over 16 cells",
                exercised="rescued",
            ),
            Claim(
                "LSPO beats GRPO, the update it wraps",
                "pass@1",
                "lspo",
                "grpo",
                "higher",
                exercised="rescued",
            ),
        ),
        shrunk=shrunk(extra="Qwen models on math in the paper."),
        common=COMMON,
        tuning=TUNING,
        notes="Each LSPO arm runs on the recipe of the arm it is compared with: lspo_dapo "
        "(clip-higher, token-mean, dynamic sampling; the paper builds on DAPO) vs dapo, lspo "
        "(GRPO's update) vs grpo. The rollouts and tokens columns count every generated "
        "rollout: DAPO's refill rounds and the scaffold's re-rolls alike.",
    )
