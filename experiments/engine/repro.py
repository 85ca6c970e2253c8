"""The paged rollout engine in the RL step: GRPO with `rollout.engine=paged` vs the static sampler.

python scripts/reproduce.py engine --seeds 0,1,2

Not a seed paper: the measurement behind the engine's default (issue 32, "the RL
step"). Both arms are the default Countdown GRPO run; only the rollout sampler
differs. The engine keys a row's draws by (key, row, position) where the static
sampler keys them by step and batch position, so the two arms sample different
rollouts from the same key: their pass@1 should agree within seed noise, not
exactly. Held-out evaluation uses the static sampler in both arms. The timing claim
compares wall times of runs made at different machine loads (the static arm's runs are
the shared GRPO baseline's); scripts/bench_rollout.py is the controlled comparison.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import ROLLOUT_SECONDS, STEP_SECONDS
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="engine",
        paper="The paged rollout engine in the RL step (rlvr_jax, not a seed paper)",
        arms=(
            Arm(
                "paged",
                "baselines/grpo.py",
                {"rollout.engine": "paged"},
                note="GRPO sampling its rollouts with the paged continuous-batching engine "
                "(pages of 16 tokens, 64 decode slots, one prefill per group)",
            ),
            GRPO,
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), ROLLOUT_SECONDS, STEP_SECONDS),
        claims=(
            Claim(
                "the paged engine trains as well as the static sampler (pass@1 within 2 points)",
                "pass@1",
                "paged",
                "grpo",
                "within",
                margin=0.02,
            ),
            Claim(
                "the paged engine samples an RL step's rollouts faster (wall time: the "
                "static runs are shared with other pages and ran on other days and loads)",
                "rollout s",
                "paged",
                "grpo",
                "lower",
            ),
        ),
        shrunk=shrunk(),
        common=COMMON,
        tuning=TUNING,
    )
