"""The optimizers a config names: "adamw", "muon" and "iso", with one lr schedule.

  build_optimizer("adamw", ...)  AdamW, decoupled decay on matrices only.
  build_optimizer("muon", ...)   Muon (optax.contrib.muon: Newton–Schulz-orthogonalised
                                 momentum) on the hidden matrices; AdamW (with Nesterov
                                 momentum, as optax's Muon does) on embeddings, the LM
                                 head and vectors. consistent_rms scales Muon's
                                 step to AdamW's RMS, so both share one lr.
  build_optimizer("iso", ...)    ISO (rlvr_jax.optim.iso) around AdamW or Muon.

Every one is clipped by the global gradient norm first (clip_norm > 0).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import optax
from optax import contrib

from rlvr_jax.optim import iso as iso_lib

OPTIMIZERS = ("adamw", "muon", "iso")
ISO_BASES = ("adamw", "muon")
# Muon's hyperparameters (config.optimizer.muon.*): momentum β, Newton–Schulz steps, and
# the target update RMS (Liu et al. 2025's 0.2 matches AdamW's, so lr carries over).
MUON_DEFAULTS = dict(beta=0.95, ns_steps=5, consistent_rms=0.2)
# ISO's (config.optimizer.iso.*): the frames' base optimizer, the retraction, and the
# regex of the reparametrised matrices.
ISO_DEFAULTS = dict(base="adamw", retraction="qr", include=iso_lib.DEFAULT_INCLUDE)
# Matrices that Muon leaves to AdamW (token embeddings, the untied LM head).
_NOT_MUON = re.compile(r"(^|/)(embed_tokens|lm_head)(/|$)")


def lr_schedule(
    lr: float,
    total_updates: int,
    *,
    warmup_steps: int = 0,
    schedule: str = "constant",
    end_lr_fraction: float = 0.1,
) -> optax.Schedule:
    """Linear warm-up from 0 over `warmup_steps` updates, then constant or cosine to the end.

    Args:
      lr: peak learning rate.
      total_updates: optimizer updates in the run (the cosine ends there).
      warmup_steps: warm-up length in updates.
      schedule: "constant" or "cosine".
      end_lr_fraction: cosine's final lr as a fraction of `lr`.
    Returns:
      An optax schedule.
    """
    if schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(
            0.0,
            lr,
            max(warmup_steps, 1),
            max(total_updates, warmup_steps + 1),
            end_value=lr * end_lr_fraction,
        )
    if schedule != "constant":
        raise ValueError(f"unknown lr schedule {schedule!r}; valid: constant, cosine")
    sched = optax.constant_schedule(lr)
    if warmup_steps > 0:
        warmup = optax.linear_schedule(0.0, lr, warmup_steps)
        sched = optax.join_schedules([warmup, sched], [warmup_steps])
    return sched


def _matrices(tree):
    return jax.tree.map(lambda x: jnp.ndim(x) >= 2, tree)


def muon_dims(tree):
    """Muon's per-leaf dimension numbers: 2-D leaves except embeddings / LM head; else None."""

    def one(path, x):
        p = iso_lib.param_path(path)
        if jnp.ndim(x) == 2 and not _NOT_MUON.search(p):
            return contrib.MuonDimensionNumbers()
        return None

    return jax.tree_util.tree_map_with_path(one, tree)


def _base(name, sched, *, b1, b2, weight_decay, decay_mask, muon: dict[str, Any]):
    if name == "adamw":
        return optax.adamw(sched, b1=b1, b2=b2, weight_decay=weight_decay, mask=decay_mask)
    if name == "muon":
        m = {**MUON_DEFAULTS, **muon}
        return contrib.muon(
            sched,
            beta=m["beta"],
            ns_steps=m["ns_steps"],
            weight_decay=weight_decay,
            weight_decay_mask=decay_mask,
            adam_b1=b1,
            adam_b2=b2,
            adam_weight_decay=weight_decay,
            muon_weight_dimension_numbers=muon_dims,
            consistent_rms=m["consistent_rms"],
        )
    raise ValueError(f"unknown base optimizer {name!r}; valid: {', '.join(ISO_BASES)}")


def build_optimizer(
    lr: float,
    total_updates: int,
    *,
    warmup_steps: int = 0,
    schedule: str = "constant",
    end_lr_fraction: float = 0.1,
    b1: float = 0.9,
    b2: float = 0.99,
    weight_decay: float = 0.0,
    clip_norm: float = 1.0,
    name: str = "adamw",
    muon: dict[str, Any] | None = None,
    iso: dict[str, Any] | None = None,
) -> optax.GradientTransformation:
    """The optimizer `name` (one of OPTIMIZERS) with `lr_schedule` and a global-norm clip.

    Args:
      lr, total_updates, warmup_steps, schedule, end_lr_fraction: see `lr_schedule`.
      b1, b2: Adam moment decays (AdamW, and Muon's AdamW part).
      weight_decay: decoupled weight decay on matrices (never on ISO's frames).
      clip_norm: global gradient-norm clip (0 = off).
      name: "adamw", "muon" or "iso".
      muon: overrides of MUON_DEFAULTS (Muon, or ISO with base "muon").
      iso: overrides of ISO_DEFAULTS.
    Returns:
      The optax transformation (ISO's `update` needs params).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    sched = lr_schedule(
        lr,
        total_updates,
        warmup_steps=warmup_steps,
        schedule=schedule,
        end_lr_fraction=end_lr_fraction,
    )
    kw = dict(b1=b1, b2=b2, weight_decay=weight_decay, muon=dict(muon or {}))
    if name == "iso":
        o = {**ISO_DEFAULTS, **(iso or {})}
        base = _base(o["base"], sched, decay_mask=iso_lib.iso_decay_mask, **kw)
        opt = iso_lib.iso(base, include=o["include"], retraction=o["retraction"])
    else:
        opt = _base(name, sched, decay_mask=_matrices, **kw)
    return optax.chain(optax.clip_by_global_norm(clip_norm), opt) if clip_norm else opt
