"""Miniature reproduction of HL-Gauss PPO against PPO with a scalar MSE critic.

python scripts/reproduce.py hl_gauss --seeds 0,1,2
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, TUNING, shrunk

# The critic's calibration as a predictor of the rollout's success, averaged over
# the run's train steps (rl/critic.py: V_t at every response token vs the outcome).
BRIER = Metric(
    "critic Brier",
    "critic/brier",
    reduce="mean",
    fmt="{:.3f}",
    doc="critic's Brier score for the rollout's success, every response token, mean over steps",
)
ECE = Metric(
    "critic ECE",
    "critic/ece",
    reduce="mean",
    fmt="{:.3f}",
    doc="critic's expected calibration error, every response token, mean over steps",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="hl_gauss",
        paper="Start Classifying: Categorical Critics for LLM Reinforcement Learning",
        arms=(
            Arm(
                "hl-gauss",
                "hl_gauss/hl_gauss.py",
                note="51-bin categorical critic on [0, 1], "
                "cross-entropy to HL-Gauss targets (σ = 0.75 bin)",
            ),
            Arm("ppo", "baselines/ppo.py", role="baseline", note="scalar critic, clipped MSE"),
        ),
        baseline="ppo",
        metrics=(PASS_1, pass_at(8), BRIER, ECE),
        claims=(
            Claim(
                "HL-Gauss PPO improves over PPO with an MSE critic",
                "pass@1",
                "hl-gauss",
                "ppo",
                "higher",
                paper="consistent gains over PPO and DAPO",
            ),
        ),
        shrunk=shrunk(extra="Not yet: the one-hot / two-hot / Bernoulli controls."),
        common=COMMON,
        tuning=TUNING,
    )
