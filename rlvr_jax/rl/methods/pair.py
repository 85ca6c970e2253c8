"""PAIR's credit transform: pair-inclusion-weighted leave-one-out advantages.

The PAIR scheduler (`rlvr_jax.scheduling.pair`) samples a prefix of every
candidate, continues some of them, and adds each row's inclusion probability
and candidate count to the batch (its `batch_fields`); this transform reads
them. The kernel is `scheduling.pair_math.pair_advantages`.
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr_jax.rl import credit
from rlvr_jax.scheduling import pair_math


@credit.TRANSFORMS.register("pair", requires=("incl_prob_B", "candidates_B"))
def pair_transform(adv_BxT, batch):
    """PAIR: replaces the advantage with the pair-inclusion-weighted leave-one-out one.

    Â_i = 1/(G−1) Σ_{j≠i, same group} (r_i − r_j) / (π_i π_j) (`pair_math.pair_advantages`),
    unclipped and unstandardised; with every π = 1 it equals RLOO's advantage.
    Needs the PAIR scheduler's batch fields (incl_prob_B, candidates_B).
    """
    del adv_BxT
    a_B = pair_math.pair_advantages(
        jnp.asarray(batch["rewards_B"], jnp.float32),
        jnp.asarray(batch["group_B"]),
        jnp.asarray(batch["valid_B"], bool),
        jnp.asarray(batch["incl_prob_B"], jnp.float32),
        jnp.asarray(batch["candidates_B"]),
    )
    return jnp.where(jnp.asarray(batch["mask_BxT"], bool), a_B[:, None], 0.0)
