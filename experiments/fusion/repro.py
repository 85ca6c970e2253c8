"""Miniature reproduction of the fusion comparison: Merge, Mix RL and MOPD end close together.

  python scripts/reproduce.py fusion --seeds 0,1,2 --pin 1

One pipeline run per seed (experiments/fusion/fusion.py:cpu) trains every arm:
θ_0 (SFT on a Countdown + arithmetic mixture), one GRPO specialist per domain,
two task-arithmetic merges of them (λ = (1, 1) and (0.5, 0.5)), Mix RL on the
pooled mixture and MOPD routed to the specialists. Each arm is one stage's
export, so all arms of a seed share one run. pass@1 is the mean over the two
domains' held-out problems (the paper's "on average"); the claims are
equivalence claims with the paper's 1.4-point margin.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import PASS_1_BEFORE
from rlvr_jax.repro.miniature import TUNING

FUSION = "fusion/fusion.py:cpu"
MARGIN = 0.014  # "differ by at most 1.4 points on average" (abstract), in pass@1 units


def _domain(name: str) -> Metric:
    return Metric(
        f"{name} pass@1",
        f"{name}/pass@1",
        scale=100.0,
        fmt="{:.1f}",
        doc=f"held-out {name} pass@1 of the arm's model, in %",
    )


def _stage(name: str, stage: str, role: str = "method", note: str = "") -> Arm:
    return Arm(name, FUSION, stage=stage, role=role, note=note)


def get_reproduction() -> Reproduction:
    within = [
        Claim(
            f"{a} and {b} differ by at most 1.4 points of mean pass@1",
            "pass@1",
            a,
            b,
            "within",
            paper="≤ 1.4 points apart on average",
            margin=MARGIN,
        )
        for a, b in (("mopd", "mix"), ("merge_avg", "mix"), ("merge_sum", "mix"))
    ]
    return Reproduction(
        slug="fusion",
        paper="Consolidating RLVR across domains: Merge, Mix RL and MOPD",
        arms=(
            _stage(
                "mopd",
                "mopd",
                note="OPD on the mixture, each prompt scored by its domain's specialist",
            ),
            _stage("mix", "mix", role="baseline", note="GRPO on the pooled mixture (0.5/0.5)"),
            _stage("merge_avg", "merge_avg", note="θ_0 + Σ 0.5·(θ_d − θ_0)"),
            _stage("merge_sum", "merge_sum", note="θ_0 + Σ (θ_d − θ_0)"),
            _stage("theta0", "base_sft", role="ablation", note="the common base θ_0"),
            _stage("rl_countdown", "rl_countdown", role="ablation", note="a specialist"),
            _stage("rl_arithmetic", "rl_arithmetic", role="ablation", note="a specialist"),
        ),
        baseline="mix",
        metrics=(PASS_1_BEFORE, PASS_1, pass_at(8), _domain("countdown"), _domain("arithmetic")),
        claims=tuple(within),
        shrunk=(
            "a 0.92M-parameter Countdown warm start, SFT-trained into θ_0 on a synthetic "
            "Countdown + multi-step arithmetic mixture (300 steps), in place of the paper's "
            "LLM and domains; specialists 20 GRPO steps of 16 prompts × 8 rollouts, Mix RL and "
            "MOPD 40; evaluation of each export on 64 held-out problems per domain × 8 samples."
        ),
        tuning=TUNING,
        notes="Both merge weightings are arms (the abstract does not fix λ); both are "
        "claimed against Mix RL, chosen before any run here. 'pass@1 before' is the "
        "warm start's, before θ_0's SFT.",
    )
