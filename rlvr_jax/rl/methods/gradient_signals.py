"""Gradient-signal methods: GAPO clip bounds, CSCR credit reallocation, GAR model signatures.

Registered here:
  policy losses "gapo" (token PPO surrogate with GAPO's per-rollout clip
    bounds) and "gapo_gspo" (GSPO's sequence surrogate with them);
  credit transform "cscr", which reads the score stage's counterfactual
    log-prob shifts "cf_shift_correct_BxT" (Δ⁺_t = ℓ⁺_t − ℓ_t under a context
    asserting the answer is correct) and "cf_shift_incorrect_BxT" (Δ⁻_t).

GAR is a score-stage signal (it replaces the sequence reward before the
advantage estimator), so it is not a credit transform: the score stage calls
`gar_signatures_from_model` on the rollouts and on the prompts' expert
solutions, then `gar_rewards_from_signatures`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.core import gar as gar_lib
from rlvr_jax.rl import credit, objectives

# ------------------------------------------------------------------------------ GAPO


@objectives.POLICY_LOSSES.register(
    "gapo", eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5, ref_scale=0.0
)
def gapo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
):
    """GAPO token PPO: ε_i = clip(ε·|A_i|/Ā, ε_min, ε_max) per rollout (`core.gapo`).

    Ā is the mean |A_j| over the micro-batch's rows with A_j ≠ 0, unless
    ref_scale > 0 fixes it (then the bounds do not depend on the micro-batching).
    Logs clip fractions and the mean bounds "eps_low" / "eps_high".
    """
    loss, stats = gapo_lib.gapo_ppo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    return loss, {k.removesuffix("_BxT"): v for k, v in stats.items()}


@objectives.POLICY_LOSSES.register(
    "gapo_gspo", eps_low=3e-4, eps_high=4e-4, eps_min=1.5e-4, eps_max=1e-3, ref_scale=0.0
)
def gapo_gspo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
):
    """GAPO on GSPO's sequence ratio (use aggregation "seq-mean-token-mean", as for "gspo")."""
    m = (jnp.asarray(mask_BxT) != 0).astype(jnp.float32)
    adv_B, _ = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    loss_B, stats = gapo_lib.gapo_gspo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_B,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    # Each sequence's loss on each of its tokens: "seq-mean-token-mean" gives GSPO's mean.
    return loss_B[:, None] * m, {k.removesuffix("_B"): v[:, None] * m for k, v in stats.items()}


# ------------------------------------------------------------------------------ CSCR
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


# ------------------------------------------------------------------------------- GAR
def output_projection_VxD(model):
    """The model's output projection as [V, D] rows (tied: the embedding itself), float32."""
    if model.lm_head is None:
        return model.embed_tokens[...].astype(jnp.float32)
    return model.lm_head[...].T.astype(jnp.float32)


def gar_signatures_from_model(
    model, tokens_BxT, attention_mask_BxT, mask_BxT, *, variant="grad_hidden", chunk=1024
):
    """GAR signatures S_i of full sequences (prompt + response) under `model`.

    One forward pass for the final hidden states (no logits), then
    `core.gar.gar_signatures` over the response tokens: hidden state t predicts
    token t + 1, so token t of `mask_BxT` pairs with hidden state t − 1. No
    gradient flows (rewards are data).

    Args:
      model: a `rlvr_jax.models.transformer.Transformer`.
      tokens_BxT: int ids, context and response in one row (any padding).
      attention_mask_BxT: 1 at real tokens.
      mask_BxT: bool/{0,1}, the response tokens whose cross-entropy counts
        (for an expert anchor: the solution tokens).
      variant: "grad_hidden" or "grad" (`core.gar.VARIANTS`).
      chunk: vocabulary chunk size.
    Returns:
      sig_BxD float32 unit vectors (0 for rows without a response token).
    """
    out = model.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
    attn = jnp.asarray(attention_mask_BxT) != 0
    mask = (jnp.asarray(mask_BxT) != 0) & attn
    sig = gar_lib.gar_signatures(
        out.hidden[:, :-1],
        output_projection_VxD(model),
        tokens_BxT[:, 1:],
        mask[:, 1:],
        variant=variant,
        chunk=chunk,
    )
    return jax.lax.stop_gradient(sig)


def gar_rewards_from_signatures(
    sig_BxD,
    anchor_sig_GxKxD,
    anchor_valid_GxK,
    group_B,
    correct_B,
    *,
    beta=0.5,
    valid_B=None,
    aux_sig_GxJxD=None,
    aux_valid_GxJ=None,
    aux_weight=0.0,
    aux_reduce="mean",
):
    """GAR dense rewards of a batch from rollout and per-group anchor signatures.

    Args:
      sig_BxD: rollout signatures (`gar_signatures_from_model`).
      anchor_sig_GxKxD: K expert-anchor signatures per group (G = num_groups, static).
      anchor_valid_GxK: bool, which anchors exist.
      group_B: int32 group ids in [0, G).
      correct_B: bool verdicts.
      beta: β.
      valid_B: optional bool real rows.
      aux_sig_GxJxD, aux_valid_GxJ, aux_weight, aux_reduce: optional auxiliary
        anchors (see `core.gar.anchor_alignment`).
    Returns:
      (rewards_B, align_B): float32 GAR rewards and each row's alignment.
    """
    group_B = jnp.asarray(group_B, jnp.int32)
    aux = {}
    if aux_sig_GxJxD is not None:
        aux = dict(
            aux_BxJxD=jnp.asarray(aux_sig_GxJxD)[group_B],
            aux_mask_BxJ=jnp.asarray(aux_valid_GxJ)[group_B],
            aux_weight=aux_weight,
            aux_reduce=aux_reduce,
        )
    align_B, has_B = gar_lib.anchor_alignment(
        sig_BxD,
        jnp.asarray(anchor_sig_GxKxD)[group_B],
        jnp.asarray(anchor_valid_GxK)[group_B],
        **aux,
    )
    num_groups = anchor_sig_GxKxD.shape[0]
    rewards_B = gar_lib.gar_rewards(
        align_B, correct_B, group_B, num_groups, beta=beta, has_anchor_B=has_B, valid_B=valid_B
    )
    return rewards_B, align_B
