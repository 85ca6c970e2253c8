"""Off-policy corrections between the rollout's behaviour policy μ and the learner's π_old.

A row sampled by an older policy (asynchronous RL: `async_rl.max_staleness` > 0)
or by a different engine (kernels, precision) carries μ, the log-prob each token
was sampled with. The learner recomputes π_old, its own log-prob of the token
before this step's updates (`loss.recompute_old_logps`), and the PPO surrogate
is taken against π_old; a correction multiplies each token's policy-gradient
loss by a stop-gradient weight w built from the behaviour ratio

  ρ_t = π_old(y_t) / μ(y_t)            (per token)
  ρ_i = Π_t ρ_t = exp(Σ_t log ρ_t)     (per sequence)

Registered corrections (`CORRECTIONS`, chosen by `loss.rollout_correction`,
cap C = `loss.rollout_correction_cap` > 1):

  tis_token      w_t = min(ρ_t, C)                      truncated IS (Yao et al. 2025)
  tis_sequence   w_t = min(ρ_i, C) on every token of i  sequence-level truncated IS
  mis_token      w_t = ρ_t if 1/C ≤ ρ_t ≤ C else 0      masked IS (IcePop): tokens dropped
  mis_sequence   w_t = ρ_i if 1/C ≤ ρ_i ≤ C else 0      masked IS: whole sequences dropped
  decoupled      w_t = ρ_t if ρ_t ≤ C else 0            decoupled PPO (AReaL): π_old is the
                                                        proximal policy, ρ the behaviour
                                                        weight, tokens above the cap masked

Every kernel is pure and jit-able and returns 0 at masked positions whatever
the inputs hold there. `correction_stats` is the host-side diagnostic of the
same weights (mean/max/quantiles of ρ, the share clipped or dropped).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.registry import Registry

CORRECTIONS = Registry("rollout correction")

# log ρ is clamped before exp: exp(±80) stays finite in float32.
_LOG_CLAMP = 80.0


def _log_rho(old_logps_BxT, behaviour_logps_BxT, m):
    diff = jnp.where(m, old_logps_BxT, 0.0) - jnp.where(m, behaviour_logps_BxT, 0.0)
    return jnp.clip(diff, -_LOG_CLAMP, _LOG_CLAMP)


def _seq_log_rho_B(log_rho_BxT, m):
    return jnp.clip(jnp.sum(jnp.where(m, log_rho_BxT, 0.0), -1), -_LOG_CLAMP, _LOG_CLAMP)


@CORRECTIONS.register("tis_token")
def tis_token(log_rho_BxT, m, cap):
    return jnp.exp(jnp.minimum(log_rho_BxT, jnp.log(cap)))


@CORRECTIONS.register("tis_sequence")
def tis_sequence(log_rho_BxT, m, cap):
    w_B = jnp.exp(jnp.minimum(_seq_log_rho_B(log_rho_BxT, m), jnp.log(cap)))
    return jnp.broadcast_to(w_B[:, None], log_rho_BxT.shape)


@CORRECTIONS.register("mis_token")
def mis_token(log_rho_BxT, m, cap):
    keep = jnp.abs(log_rho_BxT) <= jnp.log(cap)
    return jnp.where(keep, jnp.exp(log_rho_BxT), 0.0)


@CORRECTIONS.register("mis_sequence")
def mis_sequence(log_rho_BxT, m, cap):
    s_B = _seq_log_rho_B(log_rho_BxT, m)
    w_B = jnp.where(jnp.abs(s_B) <= jnp.log(cap), jnp.exp(s_B), 0.0)
    return jnp.broadcast_to(w_B[:, None], log_rho_BxT.shape)


@CORRECTIONS.register("decoupled")
def decoupled(log_rho_BxT, m, cap):
    return jnp.where(log_rho_BxT <= jnp.log(cap), jnp.exp(log_rho_BxT), 0.0)


def correction_weights(kind: str, old_logps_BxT, behaviour_logps_BxT, mask_BxT, *, cap: float):
    """The stop-gradient weight w_BxT of correction `kind` (see the module docstring).

    Args:
      kind: a `CORRECTIONS` name.
      old_logps_BxT: the learner's log π_old of the sampled tokens, [B, T] float.
      behaviour_logps_BxT: the rollout's log μ of the same tokens, [B, T] float.
      mask_BxT: [B, T] bool or {0, 1}: the loss tokens.
      cap: C > 1.
    Returns:
      w_BxT: float32, stop-gradient, 0 at masked positions.
    """
    m = jnp.asarray(mask_BxT).astype(bool)
    log_rho = _log_rho(
        jnp.asarray(old_logps_BxT, jnp.float32), jnp.asarray(behaviour_logps_BxT, jnp.float32), m
    )
    w = CORRECTIONS.get(kind).fn(log_rho, m, jnp.asarray(cap, jnp.float32))
    return jax.lax.stop_gradient(jnp.where(m, w, 0.0))


def correction_stats(
    kind: str, old_logps_BxT, behaviour_logps_BxT, mask_BxT, *, cap: float
) -> dict[str, float]:
    """Host-side diagnostics of the behaviour ratio and of correction `kind`'s weights.

    Returns {"is/ratio_mean", "is/ratio_max", "is/ratio_p50", "is/ratio_p90",
    "is/ratio_p99", "is/ratio_min", "is/seq_ratio_mean"}: token ratios ρ_t over the
    loss tokens and sequence ratios ρ_i over rows with a loss token; with a kind
    other than "none" also "is/weight_mean" and "is/clipped_frac" (tokens whose
    weight was truncated at C) or "is/masked_frac" (tokens whose weight is 0).
    Empty when no token trains.
    """
    m = np.asarray(mask_BxT, bool)
    if not m.any():
        return {}
    old = np.asarray(old_logps_BxT, np.float64)
    mu = np.asarray(behaviour_logps_BxT, np.float64)
    log_rho = np.clip(np.where(m, old - mu, 0.0), -_LOG_CLAMP, _LOG_CLAMP)
    rho = np.exp(log_rho[m])
    rows = m.any(-1)
    seq = np.exp(np.clip(log_rho.sum(-1)[rows], -_LOG_CLAMP, _LOG_CLAMP))
    q50, q90, q99 = np.quantile(rho, [0.5, 0.9, 0.99])
    out = {
        "is/ratio_mean": float(rho.mean()),
        "is/ratio_min": float(rho.min()),
        "is/ratio_max": float(rho.max()),
        "is/ratio_p50": float(q50),
        "is/ratio_p90": float(q90),
        "is/ratio_p99": float(q99),
        "is/seq_ratio_mean": float(seq.mean()),
    }
    if kind == "none":
        return out
    w = np.asarray(correction_weights(kind, old, mu, m, cap=cap))[m]
    out["is/weight_mean"] = float(w.mean())
    if kind.startswith("tis"):
        out["is/clipped_frac"] = float(np.mean(w >= cap * (1 - 1e-6)))
    else:
        out["is/masked_frac"] = float(np.mean(w == 0.0))
    return out
