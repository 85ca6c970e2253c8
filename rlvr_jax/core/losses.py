"""Policy, KL, entropy and critic loss kernels on masked token arrays.

Every kernel is a pure, jit-able function on float arrays. `mask_BxT` (bool or
{0, 1}) marks the response tokens that train; log-probs are those of the sampled
tokens. Kernels return per-token (or per-sequence) losses that are exactly 0 at
masked positions, whatever the inputs hold there (padding may be -inf or NaN).

Losses are reduced in two steps so that micro-batching and data-parallel splits
give the same gradient as one batch: `aggregate` returns (sum, denominator); the
trainer sums the denominators of all micro-batches (they depend only on masks,
so this is known before any gradient) and divides every micro-batch sum by that
GLOBAL denominator:

  denom = sum(aggregate(l, m, mode)[1] for l, m in micro_batches)   # split along B
  grad = sum(jax.grad(lambda p: aggregate_with_denominator(l(p), m, mode, denom)) ...)

Symbols: ρ = π_θ / π_old (token ratio), A (advantage), ε_low / ε_high (clip
range), c (dual clip), s_i (GSPO sequence ratio), β (KL coefficient).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "constant")
KL_KINDS = ("k1", "k2", "k3")

_F32 = jnp.float32


def _bool_mask(mask_BxT):
    return jnp.asarray(mask_BxT) != 0


def _masked(x, mask):
    """x in float32 with masked entries zeroed (so -inf/NaN padding never reaches arithmetic)."""
    return jnp.where(mask, jnp.asarray(x, _F32), 0.0)


def log_ratio(logps_BxT, old_logps_BxT, mask_BxT, *, clamp=20.0):
    """Clamped token log ratio log ρ = clip(log π_θ − log π_old, −clamp, clamp).

    The clamp (ours; default 20, exp(20) ≈ 4.9e8) keeps exp(log ρ) finite in float32.
    Gradients are zero where the clamp binds.

    Args:
      logps_BxT: log π_θ of the sampled tokens, [B, T] float.
      old_logps_BxT: log π_old of the same tokens (behaviour policy), [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}; tokens that train.
      clamp: bound on |log ρ|.
    Returns:
      log_ratio_BxT: [B, T] float32, 0 at masked positions.
    """
    m = _bool_mask(mask_BxT)
    diff = _masked(logps_BxT, m) - _masked(old_logps_BxT, m)
    return jnp.where(m, jnp.clip(diff, -clamp, clamp), 0.0)


def ratio(logps_BxT, old_logps_BxT, mask_BxT, *, clamp=20.0):
    """Token ratio ρ = exp(log_ratio(...)); [B, T] float32, 1 at masked positions."""
    return jnp.exp(log_ratio(logps_BxT, old_logps_BxT, mask_BxT, clamp=clamp))


def aggregate(values_BxT, mask_BxT, mode, *, constant=None):
    """Reduces per-token values to (sum, denominator) over the masked tokens.

    Modes (`mode` is static under jit):
      "token-mean":          Σ_{i,t} v, denom = number of tokens (DAPO).
      "seq-mean-token-mean": Σ_i mean_t v, denom = number of sequences with ≥ 1 token (GRPO).
      "seq-mean-token-sum":  Σ_{i,t} v, denom = number of sequences with ≥ 1 token.
      "constant":            Σ_{i,t} v, denom = `constant` × number of sequences with ≥ 1
                             token (Dr.GRPO: `constant` = L_max, the generation budget).
    Rows without a masked-in token (padding rows of a partly filled batch) count in
    no denominator, as in verl's `agg_loss`: a batch padded with empty rows gives
    the same loss as the batch without them. The loss is sum / denom. For exact
    micro-batching split along B (never inside a sequence), add up the
    denominators of all micro-batches first and pass that global count to
    `aggregate_with_denominator` for each micro-batch.

    Args:
      values_BxT: per-token values (e.g. a loss), [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}.
      mode: one of AGGREGATION_MODES.
      constant: mode "constant"'s normaliser per non-empty sequence (number or scalar
        array); required there.
    Returns:
      (sum, denominator): float32 scalars.
    Raises:
      ValueError: unknown mode, or mode "constant" without `constant`.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: {AGGREGATION_MODES}")
    m = _bool_mask(mask_BxT)
    v = _masked(values_BxT, m)
    tokens_B = m.sum(-1).astype(_F32)
    rows = (tokens_B > 0).sum().astype(_F32)  # sequences with ≥ 1 token
    if mode == "token-mean":
        return v.sum(), tokens_B.sum()
    if mode == "seq-mean-token-mean":
        per_seq_B = v.sum(-1) / jnp.maximum(tokens_B, 1.0)
        return per_seq_B.sum(), rows
    if mode == "seq-mean-token-sum":
        return v.sum(), rows
    if constant is None:
        raise ValueError('mode "constant" needs `constant` (e.g. L_max for Dr.GRPO)')
    return v.sum(), jnp.asarray(constant, _F32) * rows


def aggregate_with_denominator(values_BxT, mask_BxT, mode, denominator):
    """sum / denominator, with the sum of `aggregate` and a caller-given (global) denominator.

    Args:
      values_BxT, mask_BxT, mode: as in `aggregate`.
      denominator: the global denominator (Σ of the micro-batches' `aggregate`
        denominators), number or scalar array.
    Returns:
      The normalised loss, float32 scalar; 0 when denominator ≤ 0 (nothing to train on).
    """
    total, _ = aggregate(values_BxT, mask_BxT, mode, constant=1.0)
    denom = jnp.asarray(denominator, _F32)
    positive = denom > 0
    return jnp.where(positive, total / jnp.where(positive, denom, 1.0), 0.0)


def _clipped_objective(rho, adv, eps_low, eps_high):
    """min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A) and where each clip bound binds."""
    obj = jnp.minimum(rho * adv, jnp.clip(rho, 1.0 - eps_low, 1.0 + eps_high) * adv)
    clip_low = (adv < 0) & (rho < 1.0 - eps_low)
    clip_high = (adv > 0) & (rho > 1.0 + eps_high)
    return obj, clip_low, clip_high


def ppo_clip_objective(
    logps_BxT,
    old_logps_BxT,
    adv_BxT,
    mask_BxT,
    *,
    eps_low=0.2,
    eps_high=0.2,
    dual_clip=None,
    clamp=20.0,
):
    """PPO clipped surrogate with clip-higher and optional dual clip, as a per-token loss.

    Surrogate objective J_t = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A) (PPO; DAPO's
    clip-higher uses ε_low = 0.2, ε_high = 0.28). With dual clip c > 1 (Ye et al. 2020,
    e.g. 3.0), for A < 0 only: J_t = max(min(ρA, clip(ρ)A), cA), i.e. the loss
    −J_t = min(−min(ρA, clip(ρ)A), −cA) is bounded by −cA when ρ is very large.
    The loss is −J_t.

    Args:
      logps_BxT, old_logps_BxT: log π_θ and log π_old of the sampled tokens, [B, T] float.
      adv_BxT: advantages A, [B, T] float (broadcast sequence advantages beforehand).
      mask_BxT: [B, T] bool or {0, 1}.
      eps_low, eps_high: ε_low, ε_high.
      dual_clip: c (> 1) or None for no dual clip; a Python number.
      clamp: bound on |log ρ| (see `log_ratio`).
    Returns:
      loss_BxT: [B, T] float32, 0 at masked positions.
      stats: float32 {0, 1} indicators [B, T], 0 at masked positions, to be aggregated
        into clip fractions: "clip_low_BxT" (A < 0, ρ < 1 − ε_low), "clip_high_BxT"
        (A > 0, ρ > 1 + ε_high), "dual_clip_BxT" (A < 0 and −cA is the loss).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip c must be > 1, got {dual_clip}")
    m = _bool_mask(mask_BxT)
    rho = ratio(logps_BxT, old_logps_BxT, m, clamp=clamp)
    adv = _masked(adv_BxT, m)
    obj, clip_low, clip_high = _clipped_objective(rho, adv, eps_low, eps_high)
    dual = jnp.zeros_like(m)
    if dual_clip is not None:
        floor = dual_clip * adv
        dual = (adv < 0) & (floor > obj)
        obj = jnp.where(adv < 0, jnp.maximum(obj, floor), obj)
    stats = {
        "clip_low_BxT": (clip_low & m).astype(_F32),
        "clip_high_BxT": (clip_high & m).astype(_F32),
        "dual_clip_BxT": (dual & m).astype(_F32),
    }
    return jnp.where(m, -obj, 0.0), stats


def _mean_log_ratio_B(logps_BxT, old_logps_BxT, mask_BxT, clamp):
    m = _bool_mask(mask_BxT)
    log_rho = log_ratio(logps_BxT, old_logps_BxT, m, clamp=clamp)
    return log_rho.sum(-1) / jnp.maximum(m.sum(-1).astype(_F32), 1.0)


def gspo_sequence_ratio(logps_BxT, old_logps_BxT, mask_BxT, *, clamp=20.0):
    """GSPO length-normalised sequence ratio s_i = exp((1/|y_i|) Σ_t log ρ_{i,t}).

    Args:
      logps_BxT, old_logps_BxT, mask_BxT: as in `log_ratio` (token log ratios are clamped).
    Returns:
      s_B: [B] float32; 1 for all-masked rows.
    """
    return jnp.exp(_mean_log_ratio_B(logps_BxT, old_logps_BxT, mask_BxT, clamp))


def gspo_objective(
    logps_BxT, old_logps_BxT, adv_B, mask_BxT, *, eps_low=3e-4, eps_high=4e-4, clamp=20.0
):
    """GSPO (Zheng et al. 2025) sequence-level clipped loss −min(s_i A_i, clip(s_i) A_i).

    Defaults are the paper's clip ranges (ε_low = 3e-4, ε_high = 4e-4). The paper's
    objective averages over sequences: divide Σ_i loss_B by the global number of
    sequences with ≥ 1 token (the "seq-mean-token-mean" denominator of `aggregate`).

    Args:
      logps_BxT, old_logps_BxT, mask_BxT: as in `log_ratio`.
      adv_B: sequence advantages A_i, [B] float.
      eps_low, eps_high: ε_low, ε_high on s_i.
      clamp: bound on each token's |log ρ|.
    Returns:
      loss_B: [B] float32, 0 for all-masked rows.
      stats: float32 {0, 1} indicators [B] "clip_low_B", "clip_high_B" (0 for empty rows).
    """
    valid_B = _bool_mask(mask_BxT).any(-1)
    s_B = gspo_sequence_ratio(logps_BxT, old_logps_BxT, mask_BxT, clamp=clamp)
    adv = _masked(adv_B, valid_B)
    obj, clip_low, clip_high = _clipped_objective(s_B, adv, eps_low, eps_high)
    stats = {
        "clip_low_B": (clip_low & valid_B).astype(_F32),
        "clip_high_B": (clip_high & valid_B).astype(_F32),
    }
    return jnp.where(valid_B, -obj, 0.0), stats


def gspo_token_objective(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low=3e-4, eps_high=4e-4, clamp=20.0
):
    """GSPO-token: per-token loss with ratio s_{i,t} = sg[s_i] · π_θ(y_t) / sg[π_θ(y_t)].

    s_{i,t} equals s_i in value, so clipping decisions are the sequence's, but the
    gradient flows per token, weighted by per-token advantages A_{i,t}. Aggregated
    with "seq-mean-token-mean" and A_{i,t} = A_i, loss and gradient equal `gspo_objective`.

    Args:
      logps_BxT, old_logps_BxT, mask_BxT: as in `log_ratio`.
      adv_BxT: per-token advantages A_{i,t}, [B, T] float.
      eps_low, eps_high, clamp: as in `gspo_objective`.
    Returns:
      loss_BxT: [B, T] float32, 0 at masked positions.
      stats: float32 {0, 1} indicators [B, T] "clip_low_BxT", "clip_high_BxT".
    """
    m = _bool_mask(mask_BxT)
    logp = _masked(logps_BxT, m)
    log_s_B = jax.lax.stop_gradient(_mean_log_ratio_B(logps_BxT, old_logps_BxT, m, clamp))
    rho = jnp.where(m, jnp.exp(log_s_B[:, None] + logp - jax.lax.stop_gradient(logp)), 1.0)
    adv = _masked(adv_BxT, m)
    obj, clip_low, clip_high = _clipped_objective(rho, adv, eps_low, eps_high)
    stats = {
        "clip_low_BxT": (clip_low & m).astype(_F32),
        "clip_high_BxT": (clip_high & m).astype(_F32),
    }
    return jnp.where(m, -obj, 0.0), stats


def truncated_importance_weights(trainer_logps_BxT, rollout_logps_BxT, mask_BxT, *, cap=2.0):
    """Truncated importance sampling (TIS) weights for rollout/trainer mismatch.

    The sampler (rollout engine) and the trainer compute slightly different
    log-probs for the same tokens (kernels, precision, sharding). TIS (Yao et al.
    2025) multiplies each token's policy-gradient loss by
    w_t = min(π_trainer(y_t) / π_rollout(y_t), C), a constant (stop-gradient) that
    corrects the off-policy sampling with bounded variance.

    Args:
      trainer_logps_BxT: trainer log-probs at the old parameters, [B, T] float.
      rollout_logps_BxT: sampler log-probs of the same tokens, [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}.
      cap: C > 0, the truncation.
    Returns:
      w_BxT: [B, T] float32 in [0, C], stop-gradient, 0 at masked positions.
    """
    m = _bool_mask(mask_BxT)
    diff = _masked(trainer_logps_BxT, m) - _masked(rollout_logps_BxT, m)
    # exp(min(d, log C)) = min(exp(d), C) without overflow for large d.
    w = jnp.exp(jnp.minimum(diff, jnp.log(jnp.asarray(cap, _F32))))
    return jax.lax.stop_gradient(jnp.where(m, w, 0.0))


def kl_penalty(logps_BxT, ref_logps_BxT, mask_BxT, kind, *, clamp=20.0, k3_cap=0.0):
    """Per-token KL(π_θ ‖ π_ref) estimators on sampled tokens (Schulman 2020).

    With d = log π_θ − log π_ref:
      "k1": d (unbiased, can be negative);
      "k2": ½ d² (≥ 0);
      "k3": min(exp(−d) + d − 1, k3_cap) (unbiased before the cap, ≥ 0; GRPO's KL term).
    For "k3" only, −d is clamped to [−clamp, clamp] so exp stays finite, and the
    value is capped at `k3_cap` when > 0 (verl's "low_var_kl" caps it at 10: a
    token far from the reference then adds a bounded loss and no gradient).
    As a loss term, k3 (or k2) gives a useful gradient; k1 is meant for rewards.

    Args:
      logps_BxT: log π_θ of the sampled tokens, [B, T] float.
      ref_logps_BxT: log π_ref of the same tokens, [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}.
      kind: one of KL_KINDS (static).
      clamp: bound on |d| inside k3's exp.
      k3_cap: upper bound on the k3 value (0 = none).
    Returns:
      kl_BxT: [B, T] float32, 0 at masked positions.
    Raises:
      ValueError: unknown kind.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid kinds: {KL_KINDS}")
    m = _bool_mask(mask_BxT)
    d = _masked(logps_BxT, m) - _masked(ref_logps_BxT, m)
    if kind == "k1":
        kl = d
    elif kind == "k2":
        kl = 0.5 * jnp.square(d)
    else:
        r = jnp.clip(-d, -clamp, clamp)
        # expm1 avoids cancellation for small r; the max guards rounding below 0.
        kl = jnp.maximum(jnp.expm1(r) - r, 0.0)
        if k3_cap:
            kl = jnp.minimum(kl, k3_cap)
    return jnp.where(m, kl, 0.0)


def kl_in_reward(rewards_B, logps_BxT, ref_logps_BxT, mask_BxT, *, beta, kind="k1", k3_cap=0.0):
    """Sequence rewards with the KL to the reference subtracted: r_i − β Σ_t KL_{i,t}.

    Our choice: a sequence-level penalty, since the group-relative advantages
    (GRPO, RLOO, REINFORCE++) are computed from sequence rewards. For per-token
    shaping (PPO with GAE), use −β · kl_penalty(...) as token rewards directly.
    The default estimator is k1 (the usual RLHF reward r − β log π_θ/π_ref). The
    result is a stop-gradient: rewards are data, not a function of θ.

    Args:
      rewards_B: sequence rewards r_i, [B] float.
      logps_BxT, ref_logps_BxT, mask_BxT: as in `kl_penalty`.
      beta: β ≥ 0.
      kind: one of KL_KINDS (static).
      k3_cap: as in `kl_penalty`.
    Returns:
      rewards_B: [B] float32.
    """
    kl_B = kl_penalty(logps_BxT, ref_logps_BxT, mask_BxT, kind, k3_cap=k3_cap).sum(-1)
    return jax.lax.stop_gradient(jnp.asarray(rewards_B, _F32) - beta * kl_B)


def entropy_bonus(entropy_BxT, mask_BxT, coef):
    """Per-token entropy term to ADD to the loss: −coef · H_t.

    Minimising the loss then raises entropy when coef > 0.

    Args:
      entropy_BxT: per-token policy entropy H_t (nats), [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}.
      coef: entropy coefficient.
    Returns:
      loss_BxT: [B, T] float32, 0 at masked positions.
    """
    m = _bool_mask(mask_BxT)
    return jnp.where(m, -coef * _masked(entropy_BxT, m), 0.0)


def clipped_value_loss(values_BxT, old_values_BxT, returns_BxT, mask_BxT, *, clip=0.2):
    """PPO critic loss ½ · max((V − R)², (V_old + clip(V − V_old, −c, c) − R)²).

    Args:
      values_BxT: critic values V under the current parameters, [B, T] float.
      old_values_BxT: values V_old at rollout time, [B, T] float.
      returns_BxT: regression targets R (e.g. GAE returns), [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}.
      clip: c ≥ 0, the value clip range.
    Returns:
      loss_BxT: [B, T] float32, 0 at masked positions.
    """
    m = _bool_mask(mask_BxT)
    v, v_old, ret = (_masked(x, m) for x in (values_BxT, old_values_BxT, returns_BxT))
    v_clipped = v_old + jnp.clip(v - v_old, -clip, clip)
    loss = 0.5 * jnp.maximum(jnp.square(v - ret), jnp.square(v_clipped - ret))
    return jnp.where(m, loss, 0.0)
