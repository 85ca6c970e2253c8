"""Miniature reproduction of NC-GRPO (latent-noise rollouts) against GRPO.

  python scripts/reproduce.py nc_grpo --seeds 0,1,2 --pin 1

NC-GRPO: half of every group sampled with Gaussian noise (σ = 0.5 × hidden RMS)
added to the last block's hidden states of the prompt encoding; the objective is
GRPO's (experiments/nc_grpo/nc_grpo.py).
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

NOISY_PASS = Metric(
    "noisy pass",
    "rollout/noise_pass_rate",
    reduce="mean",
    scale=100.0,
    fmt="{:.1f}",
    doc="training pass rate of the noisy rows, in %",
)
CLEAN_PASS = Metric(
    "clean pass",
    "rollout/not_noise_pass_rate",
    reduce="mean",
    scale=100.0,
    fmt="{:.1f}",
    doc="training pass rate of the clean rows of the same groups, in %",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="nc_grpo",
        paper="Perturb the Thought: latent-noise rollouts (NC-GRPO)",
        arms=(
            Arm(
                "nc_grpo",
                "nc_grpo/nc_grpo.py",
                note="half of each group with N(0, (0.5·RMS)²) noise on the last block's "
                "prompt hidden states; π_old the clean re-score; GRPO objective",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), NOISY_PASS, CLEAN_PASS),
        claims=(
            Claim(
                "NC-GRPO improves reasoning over GRPO (the paper: out of distribution; "
                "here: the held-out split of the training task)",
                "pass@1",
                "nc_grpo",
                "grpo",
                "higher",
            ),
            Claim("and pass@k", "pass@8", "nc_grpo", "grpo", "higher"),
        ),
        shrunk=shrunk(
            extra="The paper's out-of-distribution benchmarks have no counterpart here: "
            "the held-out split is in distribution."
        ),
        common=COMMON,
        tuning=TUNING,
    )
