"""Optimizers: AdamW, Muon and ISO (isospectral optimization) behind one builder, and ISO-Merger.

Sits beside `core` in the layering (imports only jax/optax and its own modules),
so the RL and SFT trainers and the pipelines all use it.
"""

from rlvr_jax.optim.build import (  # noqa: F401
    ISO_BASES,
    ISO_DEFAULTS,
    MUON_DEFAULTS,
    OPTIMIZERS,
    build_optimizer,
    lr_schedule,
)
from rlvr_jax.optim.iso import (  # noqa: F401
    DEFAULT_INCLUDE,
    RETRACTIONS,
    IsoState,
    iso,
    retract,
    spectrum_drift,
    svd_frames,
)
from rlvr_jax.optim.merge import (  # noqa: F401
    HF_INCLUDE,
    aligned_frames,
    iso_merge,
    task_vector_merge,
)
