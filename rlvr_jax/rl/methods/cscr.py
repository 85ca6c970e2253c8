"""CSCR: credit reallocated by counterfactual log-prob shifts (the credit transform).

Registered here: the credit transform "cscr", which reads the score stage's
counterfactual log-prob shifts "cf_shift_correct_BxT" (Δ⁺_t = ℓ⁺_t − ℓ_t under a
context asserting the answer is correct) and "cf_shift_incorrect_BxT" (Δ⁻_t),
computed by the "cscr_shift" signal of `rl.methods.model_signals`. Kernel:
`core.cscr`.
"""

from __future__ import annotations

from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.rl import credit

CSCR_FIELDS = ("cf_shift_correct_BxT", "cf_shift_incorrect_BxT")


@credit.TRANSFORMS.register(
    "cscr", requires=CSCR_FIELDS, alpha=1.0, combine="mean", budget="tokens"
)
def cscr(adv_BxT, batch, *, alpha, combine, budget):
    """CSCR: A'_t = w_t A_t, w_t ∝ (1 + s_t)^(−α), renormalised per rollout (`core.cscr`)."""
    return cscr_lib.cscr_advantages(
        adv_BxT,
        batch[CSCR_FIELDS[0]],
        batch[CSCR_FIELDS[1]],
        batch["mask_BxT"],
        alpha=alpha,
        combine=combine,
        budget=budget,
    )
