"""Miniature reproduction of GAPO: adaptive per-rollout clipping against fixed clipping.

  python scripts/reproduce.py gapo --seeds 0,1,2

Both surrogates of the paper: the token PPO clip (GAPO vs GRPO with ε = 0.2) and
GSPO's sequence clip (GAPO-GSPO vs GSPO, the baselines page's GSPO runs).
"""

from rlvr_jax.repro import PASS_1, Arm, Claim, Metric, Reproduction, pass_at
from rlvr_jax.repro.miniature import COMMON, GRPO, TUNING, shrunk

CLIP_HIGH = Metric(
    "clip high",
    "clip_high_frac",
    reduce="mean",
    scale=100.0,
    fmt="{:.2f}",
    doc="mean share of tokens clipped at the upper bound, in %",
)
CLIP_LOW = Metric(
    "clip low",
    "clip_low_frac",
    reduce="mean",
    scale=100.0,
    fmt="{:.2f}",
    doc="mean share of tokens clipped at the lower bound, in %",
)


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="gapo",
        paper="Group Adaptive Clipping Policy Optimization (GAPO)",
        arms=(
            Arm("gapo", "gapo/gapo.py", note="ε_i = clip(0.2·|A_i|/Ā, 0.1, 0.5), token PPO"),
            GRPO,
            Arm("gapo-gspo", "gapo/gapo_gspo.py", note="the adaptive clip on GSPO's ratio"),
            Arm("gspo", "baselines/gspo.py", role="baseline", note="GSPO, fixed clip"),
        ),
        baseline="grpo",
        metrics=(PASS_1, pass_at(8), CLIP_HIGH, CLIP_LOW),
        claims=(
            Claim(
                "GAPO improves pass@1 over fixed clipping",
                "pass@1",
                "gapo",
                "grpo",
                "higher",
                paper="consistent gains where base pass rates are low",
            ),
            Claim("and pass@k", "pass@8", "gapo", "grpo", "higher"),
            Claim("on the GSPO surrogate too", "pass@1", "gapo-gspo", "gspo", "higher"),
        ),
        shrunk=shrunk(extra="Qwen and Llama models on math and code in the paper."),
        common=COMMON,
        tuning=TUNING,
    )
