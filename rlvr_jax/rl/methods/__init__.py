"""Seed-method plug-ins: importing this package registers their credit transforms and losses.

Each module wraps pure kernels from `rlvr_jax.core` into the stage registries of
`rlvr_jax.rl.credit` (TRANSFORMS) and `rlvr_jax.rl.objectives` (POLICY_LOSSES).
"""

from rlvr_jax.rl.methods import (  # noqa: F401
    branch_signals,
    credit_shaping,
    cscr,
    distill,
    gapo,
    gar_signal,
    grsd,
    language,
    locators,
    model_signals,
    mopd,
    pair,
    task_signals,
    teacher_dists,
)
