"""Asynchronous GRPO (`async_rl.max_staleness` = 1, 2) vs synchronous GRPO.

python scripts/reproduce.py async_rl --seeds 0,1,2

Not a seed paper: the measurement behind asynchronous RL (issue 33). The
asynchronous arms are the default Countdown GRPO run with rollouts sampled by the
policy of k steps before (`rl.async_loop`: step t trains on groups of version
max(0, t − k)), π_old recomputed by the learner and the token-level truncated
importance weight min(π_old/μ, 2) on the loss. The schedule is fixed, so these
runs are deterministic whatever the machine's load; their wall times are not the
speed claim (the harness pins a run to one core, where the worker and the learner
share it): scripts/bench_async.py measures speed on two cores.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

CORRECTION = {"loss.recompute_old_logps": True, "loss.rollout_correction": "tis_token"}


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="async_rl",
        paper="Asynchronous RL with bounded staleness (rlvr_jax, not a seed paper)",
        arms=(
            Arm(
                "async k=1",
                "baselines/grpo.py",
                {"async_rl.max_staleness": 1, **CORRECTION},
                note="one-step-off GRPO: step t's rollouts sampled by the policy after "
                "update t − 1 while update t − 1 runs; truncated IS min(π_old/μ, 2)",
            ),
            Arm(
                "async k=2",
                "baselines/grpo.py",
                {"async_rl.max_staleness": 2, **CORRECTION},
                note="two-step-off GRPO: rollouts of version t − 2; truncated IS as k = 1",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8)),
        claims=(
            Claim(
                "one-step-off training is not worse than synchronous (pass@1 within 2 points)",
                "pass@1",
                "async k=1",
                "grpo",
                "within",
                margin=0.02,
            ),
            Claim(
                "two-step-off training is not worse than synchronous (pass@1 within 2 points)",
                "pass@1",
                "async k=2",
                "grpo",
                "within",
                margin=0.02,
            ),
            Claim(
                "one-step-off keeps pass@8 within 2 points of synchronous",
                "pass@8",
                "async k=1",
                "grpo",
                "within",
                margin=0.02,
            ),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
