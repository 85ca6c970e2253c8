"""Miniature reproduction of graph-structured difficulty estimation plugged into SARA.

  python scripts/reproduce.py graph_difficulty --seeds 0,1,2

One field differs between the arms: `select.estimator` ("graph" vs SARA's
per-prompt Beta posterior). The SARA arm is the SARA page's run.
"""

from rlvr_jax.repro import PASS_1, ROLLOUTS, Arm, Claim, Reproduction, pass_at
from rlvr_jax.repro.metrics import EFFECTIVE
from rlvr_jax.repro.miniature import COMMON, SARA, TUNING, as_role, shrunk


def get_reproduction() -> Reproduction:
    return Reproduction(
        slug="graph_difficulty",
        paper="Efficient RLVR Scheduling via Graph-Structured Online Difficulty Estimation",
        arms=(
            Arm(
                "sara+graph",
                "graph_difficulty/sara_graph.py",
                note="SARA with the kNN-graph / Potts / state-level Beta-Binomial estimator",
            ),
            as_role(SARA, "baseline"),
        ),
        baseline="sara",
        metrics=(PASS_1, pass_at(8), ROLLOUTS, EFFECTIVE),
        claims=(
            Claim(
                "the graph estimator improves the scheduler it plugs into",
                "pass@1",
                "sara+graph",
                "sara",
                "higher",
                paper="better performance (no number)",
            ),
            Claim(
                "by better difficulty estimates: more effective groups per rollout",
                "effective/1k",
                "sara+graph",
                "sara",
                "higher",
            ),
        ),
        shrunk=shrunk(
            extra="Prompt embeddings: the initial policy's mean hidden state (the "
            "paper: text embeddings + reasoning similarity)."
        ),
        common=COMMON,
        tuning=TUNING,
    )
