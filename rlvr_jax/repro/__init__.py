"""Miniature reproductions of the seed papers' headline comparisons.

`experiments/<slug>/repro.py` declares a `Reproduction` (arms, metrics, claims);
`scripts/reproduce.py <slug>` runs its arms × seeds through the trainer, sharing
and resuming runs, and writes `docs/reproductions/<slug>.md` with a verdict;
`--all` writes `docs/reproductions.md`. The top of the layering: it runs
`rlvr_jax.main` as a subprocess and reads the runs' files.
"""

from rlvr_jax.repro.harness import declared_slugs, load_reproduction, reproduce
from rlvr_jax.repro.metrics import ENTROPY, PASS_1, ROLLOUTS, TOKENS, pass_at
from rlvr_jax.repro.spec import Arm, Claim, Metric, Reproduction

__all__ = [
    "ENTROPY",
    "PASS_1",
    "ROLLOUTS",
    "TOKENS",
    "Arm",
    "Claim",
    "Metric",
    "Reproduction",
    "declared_slugs",
    "load_reproduction",
    "pass_at",
    "reproduce",
]
