"""Miniature reproduction of GRSD against GRPO on multi-turn tool_lookup episodes.

  python scripts/reproduce.py grsd --seeds 0,1,2 --pin 1

The GRPO arm is the agentic page's (experiments/agentic/repro.py): the same
config and miniature, hence the same runs.
"""

from pathlib import Path

from rlvr_jax import pyfile
from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.metrics import GAIN, PASS_1_BEFORE
from rlvr_jax.repro.miniature import TUNING

_agentic = pyfile.load(Path(__file__).parents[1] / "agentic" / "repro.py", "_repro_agentic_arms")


SHIFT = Metric(
    "guidance shift",
    "grsd/shift",
    reduce="mean",
    fmt="{:+.3f}",
    doc="mean per-token log-prob shift ℓ(guided) − ℓ(plain) of the self-teacher on the "
    "trajectories it rescales, in nats",
)
GUIDED = Metric(
    "guided rows",
    "grsd/guided_rows",
    reduce="mean",
    scale=100.0,
    fmt="{:.1f}",
    doc="share of training rows whose group got guidance (groups with a success and a "
    "failure), in %",
)
REFLECTION = Metric(
    "reflection len",
    "rollout/reflection_len",
    reduce="mean",
    fmt="{:.1f}",
    doc="mean reflection length in tokens",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="grsd",
        paper="Group-Reflective Self-Distillation (GRSD)",
        arms=(
            Arm(
                "grsd",
                "grsd/grsd.py",
                note="reflections on the verified group contrasted into guidance; the "
                "self-teacher under it rescales turn advantages by clip(exp(λ·sign(A)·Δℓ), "
                "0.5, 2), λ = 1",
            ),
            _agentic.GRPO_TOOL,
        ),
        baseline="grpo",
        common=_agentic.SHRUNK,
        metrics=(
            PASS_1_BEFORE,
            PASS_1,
            GAIN,
            pass_at(8),
            _agentic.TURNS,
            SHIFT,
            GUIDED,
            REFLECTION,
        ),
        claims=(
            Claim(
                "GRSD beats agentic RL baselines (here: GRPO on the same episodes)",
                "pass@1",
                "grsd",
                "grpo",
                "higher",
                exercised="guided rows",
            ),
        ),
        shrunk=_agentic.SHRUNK_TEXT + " ALFWorld/WebShop-style environments in the paper.",
        tuning=TUNING,
    )
