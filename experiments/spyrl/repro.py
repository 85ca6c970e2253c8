"""Miniature reproduction of SpyRL: self-play vote rewards vs GRPO on the task's own reward.

  python scripts/reproduce.py spyrl --seeds 0,1,2 --pin 1

Both arms start from the spy_describe warm start and spend the same rollouts
(10 steps × 10 prompts × 12 rows). SpyRL trains on games (describe, then vote;
rewards from the vote outcome against the predetermined spy); the GRPO arm
trains on the task's verifiable form (a civilian's vote on reference
descriptions) and never plays. Evaluation plays the trained policy against the
frozen initial one (`rollout.self_play` evaluator): detection rate (trained
civilians vs the initial spy) is the headline, as the game is where the paper's
proxy reward lives.
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import PASS_1_BEFORE
from rlvr_jax.repro.miniature import TUNING

DETECTION = Metric(
    "detection",
    "game/detection_rate",
    scale=100.0,
    fmt="{:.1f}",
    doc="games in which the trained civilians vote out the frozen initial spy, in % (final eval)",
)
SURVIVAL = Metric(
    "spy survival",
    "game/spy_survival",
    scale=100.0,
    fmt="{:.1f}",
    doc="games in which the trained spy survives the frozen initial civilians, in % (final eval)",
)
VOTE_ACC = Metric(
    "civilian vote acc.",
    "game/civilian_vote_accuracy",
    scale=100.0,
    fmt="{:.1f}",
    doc="the trained civilians' votes that name the spy, in % (final eval)",
)
TRAIN_VOTE = Metric(
    "train vote acc.",
    "rollout/civilian_voted_spy",
    reduce="mean",
    scale=100.0,
    fmt="{:.1f}",
    doc="the civilians' vote accuracy in the training games, mean over steps, in % "
    "(SpyRL only: the GRPO arm plays no games)",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="spyrl",
        paper="From RLVR to RLSVR: self-play RL in 'Who is the spy?' (SpyRL)",
        arms=(
            Arm(
                "spyrl",
                "spyrl/spyrl.py",
                note="self-play games: 2 games × 3 players × (describe, vote) per prompt; "
                "rewards from the vote outcome; four role groups per prompt",
            ),
            Arm(
                "grpo",
                "spyrl/spyrl.py:grpo",
                role="baseline",
                note="GRPO on the task's own verifiable form (a civilian's vote on "
                "reference descriptions), G = 12, no games",
            ),
        ),
        baseline="grpo",
        metrics=(
            DETECTION,
            SURVIVAL,
            VOTE_ACC,
            PASS_1_BEFORE,
            PASS_1,
            pass_at(4),
            TRAIN_VOTE,
        ),
        claims=(
            Claim(
                "self-play vote rewards beat self-improvement baselines",
                "detection",
                "spyrl",
                "grpo",
                "higher",
            ),
            Claim(
                "self-play improves the target task (here: the civilian's vote)",
                "pass@1",
                "spyrl",
                "grpo",
                "higher",
            ),
        ),
        shrunk=(
            "a 0.92M-parameter policy SFT-trained from scratch on synthetic spy_describe "
            "games (3 players, 4 attributes; docs/base_models.md) in place of the paper's "
            "LLM and open-ended target tasks; 10 RL steps of 10 prompts × 12 rows (≤ 32 new "
            "tokens); evaluation at the end on 64 held-out problems × 4 votes and 64 games "
            "per side against the frozen initial policy."
        ),
        tuning=TUNING,
        notes="With 2 games per prompt many role groups have constant rewards (both games "
        "end alike), which zeroes their gradient; the config's docstring records a one-seed "
        "run where no difference was resolved.",
    )
