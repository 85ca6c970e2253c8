"""The divergence guard: no non-finite or exploded train state is ever checkpointed.

Checking only the loss is not enough: the loss of an update is computed before
the update is applied, so a blow-up in a step's last update leaves a finite loss
and parameters of 1e29, which the step's checkpoint would then save as the "last
good" state. So after every optimizer update the trainer calls
`DivergenceGuard.check(params, metrics, ...)`, which looks at

  * the parameters after the update: all finite, and max |p| <= max_param_abs;
  * the update's gradient norm (before clipping): finite and <= max_grad_norm;

and raises `Diverged` (a FloatingPointError) before the step can be saved. The
bounds are config fields (`config.guard`, 0 = no bound); non-finite values
always stop the run. Resuming from the last good checkpoint with other
hyperparameters: `--allow_config_change=optimizer.lr` (see `run_io.RunIO`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp


class Diverged(FloatingPointError):
    """The train state went non-finite or past a bound; nothing of it was saved."""


@jax.jit
def param_health(params) -> jax.Array:
    """float32[2]: (1.0 if every parameter is finite else 0.0, the largest |parameter|).

    One fused reduction over the parameter pytree (sharded parameters reduce
    across devices), so the check costs one read of the parameters.
    """
    leaves = [x for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.floating)]
    if not leaves:
        return jnp.array([1.0, 0.0], jnp.float32)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
    biggest = jnp.max(jnp.stack([jnp.max(jnp.abs(x)).astype(jnp.float32) for x in leaves]))
    return jnp.stack([finite.astype(jnp.float32), biggest])


class DivergenceGuard:
    """Raises `Diverged` after an update that left the state non-finite or exploded."""

    def __init__(self, max_grad_norm: float = 0.0, max_param_abs: float = 0.0):
        """Args:
        max_grad_norm: bound on the update's gradient norm (0 = none; NaN always stops).
        max_param_abs: bound on the largest |parameter| (0 = none; NaN always stops).
        """
        self.max_grad_norm = float(max_grad_norm)
        self.max_param_abs = float(max_param_abs)

    def check(
        self,
        params,
        metrics: Mapping[str, float],
        *,
        step: int,
        update: int,
        last_good: int | None,
        health=None,
    ) -> None:
        """Checks the state after one optimizer update.

        Args:
          params: the parameters after the update (a pytree of arrays), or None
            with `health`.
          metrics: the update's metrics; "grad_norm" (and "critic_grad_norm") are
            checked when present.
          step: the RL step being trained (1-based, the step it will be saved as).
          update: the update's index within the step (0-based).
          last_good: the step of the newest checkpoint (None if none was saved).
          health: `param_health(params)`, when the caller computed it already (e.g.
            dispatched with the update, fetched later).
        Raises:
          Diverged: naming the quantity, its value, the bound and the config field,
            the step and update, and the checkpoint a rerun resumes from.
        """
        health = param_health(params) if health is None else health
        finite, biggest = (float(v) for v in jax.device_get(health))
        problems = []
        if finite < 1:
            problems.append("a parameter is not finite")
        elif self.max_param_abs and biggest > self.max_param_abs:
            problems.append(
                f"max |parameter| = {biggest:.3g} exceeds config.guard.max_param_abs = "
                f"{self.max_param_abs:g}"
            )
        for key in ("grad_norm", "critic_grad_norm"):
            if key not in metrics:
                continue
            value = float(metrics[key])
            if not math.isfinite(value):
                problems.append(f"{key} = {value}")
            elif self.max_grad_norm and value > self.max_grad_norm:
                problems.append(
                    f"{key} = {value:.3g} exceeds config.guard.max_grad_norm = "
                    f"{self.max_grad_norm:g}"
                )
        if problems:
            raise Diverged(
                f"training diverged at step {step} (update {update} of the step): "
                f"{'; '.join(problems)}. Nothing of this step was saved. "
                f"{resume_hint(last_good)}"
            )


def resume_hint(last_good: int | None) -> str:
    """What a rerun of the same command does, for a run stopped by a non-finite value."""
    if last_good is None:
        return (
            "No checkpoint was saved yet: a rerun starts from the beginning "
            "(change hyperparameters freely, or use a new --workdir)."
        )
    return (
        f"The last good checkpoint (step {last_good}) is intact: rerun to resume from it, "
        "e.g. with a lower learning rate: --config.optimizer.lr=... "
        "--allow_config_change=optimizer.lr"
    )
