"""Importance-corrected surrogates for rollouts generated off-context (OC-GRPO, LSPO).

Both methods train π_θ(·|x) on responses sampled from another distribution μ:
OC-GRPO samples with privileged guidance in the prompt, μ = π(·|x, guide);
LSPO re-rolls all-fail prompts with a throw-away LoRA adapter,
μ = π_{base+adapter}(·|x). The behaviour log-probs ℓ^μ are those the sampler
computed under the generating context/adapter; π_old(·|x) is the policy on the
plain prompt (the target objective). The update is the PPO surrogate in
ρ = π_θ/π_old, weighted by a truncated, stop-gradient importance weight
w = π_old/μ (the "decoupled" PPO form, which keeps PPO's trust region around
π_old while correcting for sampling from μ):

  token form:    w_{i,t} = clip(π_old(y_t)/μ(y_t), w_min, C)
  sequence form: w_i = clip(exp(Σ_t (ℓ^old_t − ℓ^μ_t) / n_i), w_min, C)   (length-normalised)
                 or exp(Σ_t (ℓ^old_t − ℓ^μ_t)) with length_normalise=False
  loss_{i,t} = −w · min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A)

Fixed by the abstracts: importance correction toward the unguided / base
objective, truncated (LSPO names π_base/π_adapter). Ours: the decoupled form,
truncation cap C = 2 and floor w_min = 0, the length-normalised sequence weight
(the plain product of hundreds of token ratios under/overflows), OC-GRPO's
default the token form, LSPO's the sequence form. On-policy rows carry
ℓ^μ = ℓ^old and get w = 1 exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.core import losses

LEVELS = ("token", "sequence")
_F32 = jnp.float32


def off_context_weights(
    old_logps_BxT,
    behaviour_logps_BxT,
    mask_BxT,
    *,
    level="token",
    cap=2.0,
    floor=0.0,
    length_normalise=True,
    clamp=20.0,
):
    """Truncated importance weights w = π_old/μ, per token or per sequence.

    Args:
      old_logps_BxT: [B, T] log π_old(y_t | plain context).
      behaviour_logps_BxT: [B, T] log μ(y_t | generating context/adapter).
      mask_BxT: [B, T] bool response/loss mask.
      level: static, "token" or "sequence".
      cap: truncation C > 0 (ours: 2).
      floor: lower truncation w_min ≥ 0 (ours: 0, none).
      length_normalise: static; sequence form uses the mean log ratio (ours: True).
      clamp: bound on |log w| per token before the sum (keeps exp finite).
    Returns:
      (w_BxT, truncated_BxT): float32 stop-gradient weights (0 at masked
      positions; a sequence weight is repeated on its tokens) and float32 {0, 1}
      indicators of tokens whose weight was truncated (cap or floor).
    """
    if level not in LEVELS:
        raise ValueError(f"off_context: unknown level {level!r}; valid: {', '.join(LEVELS)}")
    # Checked for Python numbers only: traced values (jit arguments) cannot be tested.
    if all(isinstance(x, int | float) for x in (floor, cap)) and not 0.0 <= floor <= cap:
        raise ValueError(f"off_context: need 0 <= floor <= cap, got floor={floor}, cap={cap}")
    log_w = losses.log_ratio(old_logps_BxT, behaviour_logps_BxT, mask_BxT, clamp=clamp)
    m = jnp.asarray(mask_BxT) != 0
    if level == "sequence":
        total_B = log_w.sum(-1)
        if length_normalise:
            total_B = total_B / jnp.maximum(m.sum(-1), 1).astype(_F32)
        log_w = jnp.broadcast_to(total_B[:, None], m.shape)
    log_cap = jnp.log(jnp.asarray(cap, _F32))
    w = jnp.maximum(jnp.exp(jnp.minimum(log_w, log_cap)), floor)
    truncated = (log_w > log_cap) | (jnp.exp(log_w) < floor)
    w = jax.lax.stop_gradient(jnp.where(m, w, 0.0))
    return w, (truncated & m).astype(_F32)


def off_context_objective(
    logps_BxT,
    old_logps_BxT,
    behaviour_logps_BxT,
    adv_BxT,
    mask_BxT,
    *,
    level="token",
    cap=2.0,
    floor=0.0,
    length_normalise=True,
    eps_low=0.2,
    eps_high=0.2,
    clamp=20.0,
):
    """Importance-corrected PPO clip loss −w·min(ρA, clip(ρ)A) (module doc).

    Args:
      logps_BxT: log π_θ of the sampled tokens under the plain context.
      old_logps_BxT: log π_old under the plain context.
      behaviour_logps_BxT: log μ under the generating context/adapter.
      adv_BxT: [B, T] advantages.
      mask_BxT: [B, T] bool response/loss mask.
      level, cap, floor, length_normalise: see `off_context_weights`.
      eps_low, eps_high: PPO clip range on ρ = π_θ/π_old.
      clamp: bound on |log ρ| and per-token |log w|.
    Returns:
      loss_BxT: float32 [B, T], 0 at masked positions.
      stats: float32 [B, T]: "clip_low_BxT", "clip_high_BxT" (PPO indicators),
        "is_weight_BxT" (w), "is_truncated_BxT" (indicator).
    """
    loss, ppo = losses.ppo_clip_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        clamp=clamp,
    )
    w, truncated = off_context_weights(
        old_logps_BxT,
        behaviour_logps_BxT,
        mask_BxT,
        level=level,
        cap=cap,
        floor=floor,
        length_normalise=length_normalise,
        clamp=clamp,
    )
    stats = {
        "clip_low_BxT": ppo["clip_low_BxT"],
        "clip_high_BxT": ppo["clip_high_BxT"],
        "is_weight_BxT": w,
        "is_truncated_BxT": truncated,
    }
    return loss * w, stats
