"""Registrations of the credit-shaping seed methods (token transforms and off-context losses).

Credit transforms (`config.credit.transforms`, applied after the estimator):
  cliff            first_mistake_B                  core.cliff
  cue_grpo         cue_B                            core.cue
  dash             teacher_logps_BxT                core.dash (self-teacher log-probs)
  cbpo             BRANCH_FIELDS (branch_member_KxB, ...)              core.cbpo
  om_grpo          answer_id_B, answer_start_B, answer_end_B           core.om_grpo
  om_grpo_contrast + pair_wins_BxB, pair_compared_BxB                  core.om_grpo
  answer_mask      answer_start_B, answer_end_B     core.om_grpo.answer_span_mask
Policy losses (`config.loss.name`):
  oc_grpo, lspo    behaviour_logps_BxT              core.off_context

Response-token indices (first_mistake_B, answer spans, branch positions) count
the row's mask_BxT tokens from 0 (see `core.cliff`). Group statistics compare
group ids pairwise or use the row count as `num_groups` (group ids are < rows).
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr_jax.core import advantages as adv_lib
from rlvr_jax.core import cbpo as cbpo_lib
from rlvr_jax.core import cliff as cliff_lib
from rlvr_jax.core import cue as cue_lib
from rlvr_jax.core import dash as dash_lib
from rlvr_jax.core import off_context
from rlvr_jax.core import om_grpo as om_lib
from rlvr_jax.rl import credit, objectives

# CBPO's branch layout (core.cbpo's module doc), from the "branch_tree" or "branches" signal.
BRANCH_FIELDS = (
    "branch_member_KxB",
    "branch_pos_K",
    "branch_start_B",
    "branch_offset_B",
    "branch_shared_BxB",
)


@credit.TRANSFORMS.register("cliff", requires=("first_mistake_B",), a=1.0, b=1.0, scale=True)
def cliff(adv_BxT, batch, *, a, b, scale):
    """Cliff: +a·|A| before a wrong rollout's first mistake, −b·|A| from it on."""
    return cliff_lib.cliff_advantages(
        adv_BxT,
        batch["mask_BxT"],
        batch["correct_B"],
        batch["first_mistake_B"],
        a=a,
        b=b,
        scale=scale,
    )


@credit.TRANSFORMS.register("cue_grpo", requires=("cue_B",), alpha=1.0, missing_cue_singleton=False)
def cue_grpo(adv_BxT, batch, *, alpha, missing_cue_singleton):
    """Cue-GRPO: positive advantages × cluster rarity, each group's positive mass kept."""
    return cue_lib.cue_rarity_advantages(
        adv_BxT,
        batch["mask_BxT"],
        batch["group_B"],
        batch["cue_B"],
        alpha=alpha,
        missing_cue_singleton=missing_cue_singleton,
        valid_B=batch["valid_B"],
    )


@credit.TRANSFORMS.register(
    "dash",
    requires=("teacher_logps_BxT",),
    gamma=0.9,
    h_min=1,
    h_max=8,
    kappa=1.0,
    coef=1.0,
    outcome_coef=0.0,
)
def dash(adv_BxT, batch, *, gamma, h_min, h_max, kappa, coef, outcome_coef):
    """DASH: outcome_coef·A + coef·a_t, a_t the gap-gated aggregation of ℓ^T − ℓ^S.

    ℓ^T = teacher_logps_BxT (the policy under privileged context), ℓ^S = old_logps_BxT.
    Ours: outcome_coef = 0 (pure OPSD, as in the paper); > 0 mixes in the outcome advantage.
    """
    a, _ = dash_lib.dash_advantages(
        batch["teacher_logps_BxT"],
        batch["old_logps_BxT"],
        batch["mask_BxT"],
        gamma=gamma,
        h_min=int(h_min),
        h_max=int(h_max),
        kappa=kappa,
    )
    m = jnp.asarray(batch["mask_BxT"]) != 0
    return jnp.where(m, outcome_coef * jnp.asarray(adv_BxT, jnp.float32) + coef * a, 0.0)


@credit.TRANSFORMS.register(
    "cbpo",
    requires=BRANCH_FIELDS,
    s_min=0.1,
    s_max=3.0,
    eps=1e-6,
    zero_sum=False,
)
def cbpo(adv_BxT, batch, *, s_min, s_max, eps, zero_sum):
    """CBPO: CBV-rescaled credit segments, shared prefixes credited once (tree mean).

    Nodes with branch_pos_K < 0 are padding. The layout comes from the score
    signal "branch_tree" (the branching rollout's tree) or "branches" (prefixes
    that independent samples happen to share). `zero_sum` (ours, not the paper's:
    its rescaling leaves a group's credit summing to ≠ 0) rescales each group's
    positive and negative credit to equal mass afterwards, signs kept
    (`core.cbpo.zero_sum_per_group`).
    """
    pos_K = jnp.asarray(batch["branch_pos_K"], jnp.int32)
    out, _ = cbpo_lib.cbpo_advantages(
        adv_BxT,
        batch["mask_BxT"],
        batch["rewards_B"],
        batch["branch_member_KxB"],
        pos_K,
        batch["branch_start_B"],
        valid_K=pos_K >= 0,
        offset_B=batch["branch_offset_B"],
        shared_BxB=batch["branch_shared_BxB"],
        s_min=s_min,
        s_max=s_max,
        eps=eps,
    )
    if zero_sum:
        group = jnp.asarray(batch["group_B"], jnp.int32)
        out = cbpo_lib.zero_sum_per_group(out, batch["mask_BxT"], group, group.shape[0])
    return out


def _consensus(batch, leave_one_out):
    return om_lib.soft_consensus_rewards(
        batch["answer_id_B"],
        batch["group_B"],
        leave_one_out=leave_one_out,
        valid_B=batch["valid_B"],
    )


def _om_grpo(batch, rewards_B, scale_by_std, eps, mask_answer):
    valid = jnp.asarray(batch["valid_B"], bool)
    a_B = adv_lib.grpo_advantages(
        rewards_B,
        batch["group_B"],
        valid.shape[0],  # group ids are < rows: a static upper bound on num_groups
        scale_by_std=scale_by_std,
        eps=eps,
        valid_B=valid,
    )
    m = jnp.asarray(batch["mask_BxT"]) != 0
    if mask_answer:
        m = om_lib.answer_span_mask(m, batch["answer_start_B"], batch["answer_end_B"])
    return adv_lib.broadcast_to_tokens(a_B, m)


_OM = dict(leave_one_out=False, scale_by_std=True, eps=1e-6, mask_answer=True)
_OM_FIELDS = ("answer_id_B", "answer_start_B", "answer_end_B")


# Both OM-GRPO transforms are label-free: they replace the verifier's advantage.
@credit.TRANSFORMS.register("om_grpo", requires=_OM_FIELDS, label_free=True, **_OM)
def om_grpo(adv_BxT, batch, *, leave_one_out, scale_by_std, eps, mask_answer):
    """OM-GRPO: GRPO on soft-consensus rewards, answer span masked (replaces adv_BxT)."""
    del adv_BxT  # label-free: the verifier's advantage is not used
    r = _consensus(batch, leave_one_out)
    return _om_grpo(batch, r, scale_by_std, eps, mask_answer)


@credit.TRANSFORMS.register(
    "om_grpo_contrast",
    requires=(*_OM_FIELDS, "pair_wins_BxB", "pair_compared_BxB"),
    label_free=True,
    lam=0.5,
    **_OM,
)
def om_grpo_contrast(adv_BxT, batch, *, lam, leave_one_out, scale_by_std, eps, mask_answer):
    """OM-GRPO with the contrast-augmented reward (1 − λ)·consensus + λ·pairwise win rate."""
    del adv_BxT
    r = _consensus(batch, leave_one_out)
    r, _ = om_lib.contrast_augmented_rewards(
        r,
        batch["pair_wins_BxB"],
        batch["pair_compared_BxB"],
        batch["group_B"],
        lam=lam,
        valid_B=batch["valid_B"],
    )
    return _om_grpo(batch, r, scale_by_std, eps, mask_answer)


@credit.TRANSFORMS.register("answer_mask", requires=("answer_start_B", "answer_end_B"))
def answer_mask(adv_BxT, batch):
    """Zero advantage on each row's answer span (OM-GRPO's mask on any estimator)."""
    m = om_lib.answer_span_mask(batch["mask_BxT"], batch["answer_start_B"], batch["answer_end_B"])
    return jnp.where(m, jnp.asarray(adv_BxT, jnp.float32), 0.0)


# Rows the rollout stage sampled off-context (`Groups.info`): the weights are also logged
# over their tokens alone (the subset "guided" of `objectives.SUBSETS`: "is_weight@guided").
OFF_CONTEXT_ROWS = ("guided_B", "scaffold_B")


def _off_context_loss(name):
    def fn(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, mb, **hp):
        objectives.POLICY_LOSSES.check_requires(name, mb)
        loss, stats = off_context.off_context_objective(
            logps_BxT, old_logps_BxT, mb["behaviour_logps_BxT"], adv_BxT, mask_BxT, **hp
        )
        out = {
            "clip_low": stats["clip_low_BxT"],
            "clip_high": stats["clip_high_BxT"],
            "is_weight": stats["is_weight_BxT"],
            "is_truncated": stats["is_truncated_BxT"],
        }
        subsets = {}
        for field in OFF_CONTEXT_ROWS:
            if field in mb:  # a static property of the batch's structure
                rows = jnp.broadcast_to(
                    jnp.asarray(mb[field], jnp.float32)[:, None], mask_BxT.shape
                )
                subsets[field.removesuffix("_B")] = {
                    "tokens": rows,
                    "is_weight": stats["is_weight_BxT"] * rows,
                    "is_truncated": stats["is_truncated_BxT"] * rows,
                }
        if subsets:
            out[objectives.SUBSETS] = subsets
        return loss, out

    fn.__name__ = name
    fn.__doc__ = f"{name}: PPO clip × truncated π_old/μ weight (see core.off_context)."
    return fn


_OFF = dict(cap=2.0, floor=0.0, length_normalise=True, eps_low=0.2, eps_high=0.2)
oc_grpo = objectives.POLICY_LOSSES.register(
    "oc_grpo", requires=("behaviour_logps_BxT",), level="token", **_OFF
)(_off_context_loss("oc_grpo"))
lspo = objectives.POLICY_LOSSES.register(
    "lspo", requires=("behaviour_logps_BxT",), level="sequence", **_OFF
)(_off_context_loss("lspo"))
