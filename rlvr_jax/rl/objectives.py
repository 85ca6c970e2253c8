"""Update stage: the policy surrogate by registry name, plus KL, entropy and TIS terms.

A policy loss has the signature

  fn(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, **hp) -> (loss_BxT, stats)

(plus `mb=`, the minibatch's arrays, for losses registered with `requires=`
naming the extra fields they read, e.g. off-context behaviour log-probs)

returning a per-token loss (0 off the mask) that `aggregate` reduces, and
{name: [B, T] float {0, 1} indicators} whose masked means are logged as
fractions. Statistics over a subset S of the tokens go under `stats[SUBSETS]`:
{S: {"tokens": [B, T] membership, name: [B, T] values on S}}, logged as the
mean over S's tokens, "name@S" (`rl.step_metrics`). Sequence-level surrogates
(GSPO) spread each sequence's loss over its tokens so that "seq-mean-token-mean"
aggregation gives the paper's mean over sequences.

`LossSpec` holds the numbers of one run's loss (hashable: a static jit
argument); `policy_loss` assembles surrogate + β·KL − entropy bonus, with
optional truncated importance weights, normalised by a caller-given global
denominator so that micro-batches add up to the full-batch gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rlvr_jax.core import losses, rollout_correction
from rlvr_jax.registry import Registry

# A loss may declare `minibatch_stats`: fn(mb, **hparams) -> {name: scalar}, statistics it
# needs over the whole minibatch before its micro-batches run, like the aggregation
# denominator (so they do not depend on the micro-batch split); it gets them as `minibatch=`.
POLICY_LOSSES = Registry("policy loss")
# The stats key of per-subset statistics: {subset: {"tokens": membership_BxT, name: BxT}}.
SUBSETS = "subsets"


@POLICY_LOSSES.register("ppo_clip", eps_low=0.2, eps_high=0.2, dual_clip=0.0)
def ppo_clip(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, dual_clip):
    """Token PPO clip with clip-higher (ε_low ≠ ε_high) and dual clip c (0 = off)."""
    loss, stats = losses.ppo_clip_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip or None,
    )
    return loss, {
        "clip_low": stats["clip_low_BxT"],
        "clip_high": stats["clip_high_BxT"],
        "dual_clip": stats["dual_clip_BxT"],
    }


def _sequence_adv_B(adv_BxT, mask_BxT):
    """Mean token advantage per row (= A_i for broadcast sequence advantages)."""
    m = jnp.asarray(mask_BxT, jnp.float32)
    return jnp.sum(adv_BxT * m, -1) / jnp.maximum(m.sum(-1), 1.0)


@POLICY_LOSSES.register("gspo", eps_low=3e-4, eps_high=4e-4)
def gspo(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high):
    """GSPO: clipped length-normalised sequence ratio (use "seq-mean-token-mean")."""
    m = jnp.asarray(mask_BxT, jnp.float32)
    loss_B, stats = losses.gspo_objective(
        logps_BxT,
        old_logps_BxT,
        _sequence_adv_B(adv_BxT, mask_BxT),
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
    )
    return loss_B[:, None] * m, {
        "clip_low": stats["clip_low_B"][:, None] * m,
        "clip_high": stats["clip_high_B"][:, None] * m,
    }


@POLICY_LOSSES.register("gspo_token", eps_low=3e-4, eps_high=4e-4)
def gspo_token(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high):
    """GSPO-token: the sequence ratio's clipping with per-token advantages."""
    loss, stats = losses.gspo_token_objective(
        logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, eps_low=eps_low, eps_high=eps_high
    )
    return loss, {"clip_low": stats["clip_low_BxT"], "clip_high": stats["clip_high_BxT"]}


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """The numbers of a run's policy loss (hashable, for jit's static arguments).

    Attributes:
      name: a POLICY_LOSSES name.
      hparams: that loss's hyperparameters as sorted (name, value) pairs.
      aggregation: one of `losses.AGGREGATION_MODES`.
      kl_coef: β of the k-estimator KL-to-reference loss term (0 = none).
      kl_kind: "k1" | "k2" | "k3".
      kl_clamp: cap on the per-token k3 value (verl's 10; 0 = none).
      entropy_coef: coefficient of the entropy bonus (0 = none).
      tis_cap: truncated importance weight cap (0 = no TIS).
      correction, correction_cap: the behaviour-policy correction of
        `core.rollout_correction` ("none" = off) and its cap C.
    """

    name: str
    hparams: tuple[tuple[str, Any], ...] = ()
    aggregation: str = "seq-mean-token-mean"
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    kl_clamp: float = 10.0
    entropy_coef: float = 0.0
    tis_cap: float = 0.0
    correction: str = "none"
    correction_cap: float = 2.0


def policy_loss(spec: LossSpec, logps_BxT, mb: dict, denominator, entropy_BxT=None, minibatch=None):
    """The policy loss of one (micro-)batch, normalised by the global denominator.

    Args:
      spec: LossSpec.
      logps_BxT: log π_θ of the tokens under the current parameters.
      mb: batch arrays: "mask_BxT" (loss mask), "old_logps_BxT", "adv_BxT", and when
        used "ref_logps_BxT" (KL) and "behaviour_logps_BxT" (TIS).
      denominator: the aggregation's denominator over the whole minibatch.
      entropy_BxT: per-token entropies (required when spec.entropy_coef > 0).
      minibatch: the loss's `minibatch_stats` over the whole minibatch.
    Returns:
      (loss, sums): the scalar loss and {name: masked sum} of the per-token
      diagnostics (policy loss, KL, entropy, clip indicators, ratio) for logging.
      Per-subset sums are under sums[SUBSETS][S] (with their token count "tokens").
    """
    mask = mb["mask_BxT"]
    entry = POLICY_LOSSES.get(spec.name)
    # Losses that read more than the standard fields (declared in `requires`) get the batch.
    extra = {"mb": mb} if entry.requires else {}
    if entry.minibatch_stats is not None:
        extra["minibatch"] = minibatch
    pg_BxT, stats = entry.fn(
        logps_BxT, mb["old_logps_BxT"], mb["adv_BxT"], mask, **extra, **dict(spec.hparams)
    )
    if spec.tis_cap:
        w = losses.truncated_importance_weights(
            mb["old_logps_BxT"], mb["behaviour_logps_BxT"], mask, cap=spec.tis_cap
        )
        pg_BxT = pg_BxT * w
    if spec.correction != "none":
        w = rollout_correction.correction_weights(
            spec.correction,
            mb["old_logps_BxT"],
            mb["behaviour_logps_BxT"],
            mask,
            cap=spec.correction_cap,
        )
        pg_BxT = pg_BxT * w
    total_BxT = pg_BxT
    m = jnp.asarray(mask, jnp.float32)
    sums = {"pg_loss": jnp.sum(pg_BxT)}
    sums.update({k: jnp.sum(v * m) for k, v in stats.items() if k != SUBSETS})
    if SUBSETS in stats:
        sums[SUBSETS] = jax.tree.map(lambda v: jnp.sum(v * m), stats[SUBSETS])
    r = losses.ratio(logps_BxT, mb["old_logps_BxT"], mask)
    sums["ratio"] = jnp.sum(r * m)
    if spec.kl_coef:
        kl_BxT = losses.kl_penalty(
            logps_BxT, mb["ref_logps_BxT"], mask, spec.kl_kind, k3_cap=spec.kl_clamp
        )
        total_BxT = total_BxT + spec.kl_coef * kl_BxT
        sums["kl"] = jnp.sum(kl_BxT)
    if spec.entropy_coef:
        total_BxT = total_BxT + losses.entropy_bonus(entropy_BxT, mask, spec.entropy_coef)
        sums["entropy"] = jnp.sum(entropy_BxT * m)
    loss = losses.aggregate_with_denominator(total_BxT, mask, spec.aggregation, denominator)
    return loss, sums


def minibatch_stats(spec: LossSpec, mb) -> dict:
    """The loss's statistics over the whole minibatch (its `minibatch_stats`; {} for most).

    Args:
      spec: LossSpec.
      mb: every row of the minibatch (fields [rows, ...]).
    """
    fn = POLICY_LOSSES.get(spec.name).minibatch_stats
    return {} if fn is None else fn(mb, **dict(spec.hparams))


def denominator(spec: LossSpec, mask_BxT, constant=0.0):
    """The aggregation denominator of `mask_BxT` (all rows of a minibatch).

    Args:
      spec: LossSpec (its aggregation mode).
      mask_BxT: the loss mask of every row the optimizer update averages over.
      constant: mode "constant"'s normaliser per non-empty row (Dr.GRPO's L_max;
        ignored by the other modes).
    Returns:
      float32 scalar.
    """
    zeros = jnp.zeros(jnp.shape(mask_BxT), jnp.float32)
    return losses.aggregate(zeros, mask_BxT, spec.aggregation, constant=constant)[1]
