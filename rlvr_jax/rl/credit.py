"""Credit stage: sequence rewards -> token advantages, by registry name.

Every estimator has the signature

  fn(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT, **hp)
      -> (adv_BxT, returns_BxT or None)

`mask_BxT` is the response (loss) mask; `values_BxT` the critic's values aligned
like the log-probs (only "gae" reads them; the others get None). The kernels
themselves live in `rlvr_jax.core.advantages`; these wrappers only adapt them
to the batch layout. Later token-level transforms (Cliff, OPSA, ...) chain after
the estimator.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlvr_jax.core import advantages as adv_lib
from rlvr_jax.registry import Registry

# An estimator declares `group_relative` when its baseline is the group's other rollouts
# (one rollout per group gives every row a zero advantage: `validate` then needs G >= 2).
ESTIMATORS = Registry("advantage estimator")
# Token-level transforms chained after the estimator (config.credit.transforms):
#   fn(adv_BxT, batch, **hp) -> adv_BxT      (+ step= if registered with uses_step)
# `batch` is the `rl.batch.Batch` (fields by name): its declared fields, plus
# whatever the score stage or the scheduler added (a transform lists those in
# `requires`).
TRANSFORMS = Registry("credit transform")


def _tokens(adv_B, mask_BxT):
    return adv_lib.broadcast_to_tokens(adv_B, mask_BxT), None


@ESTIMATORS.register("grpo", group_relative=True, scale_by_std=True, eps=1e-6)
def grpo(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT, scale_by_std, eps):
    """GRPO: (r − mean_g) / (std_g + ε), Bessel std; `scale_by_std=False` drops the division."""
    del values_BxT
    a = adv_lib.grpo_advantages(
        rewards_B, group_B, num_groups, scale_by_std=scale_by_std, eps=eps, valid_B=valid_B
    )
    return _tokens(a, mask_BxT)


@ESTIMATORS.register("dr_grpo", group_relative=True)
def dr_grpo(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT):
    """Dr.GRPO: r − mean_g (pair with loss.aggregation = "constant")."""
    del values_BxT
    return _tokens(
        adv_lib.dr_grpo_advantages(rewards_B, group_B, num_groups, valid_B=valid_B), mask_BxT
    )


@ESTIMATORS.register("rloo", group_relative=True)
def rloo(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT):
    """RLOO: r − mean of the other G − 1 rewards of the group."""
    del values_BxT
    return _tokens(
        adv_lib.rloo_advantages(rewards_B, group_B, num_groups, valid_B=valid_B), mask_BxT
    )


@ESTIMATORS.register(
    "reinforce_pp",
    group_relative=lambda options: options["baseline"] == "group",
    baseline="group",
    whiten=True,
    whiten_over="tokens",
    eps=1e-6,
)
def reinforce_pp(
    rewards_B,
    group_B,
    valid_B,
    mask_BxT,
    *,
    num_groups,
    values_BxT,
    baseline,
    whiten,
    whiten_over,
    eps,
):
    """REINFORCE++: optional group baseline, then whitening over the batch.

    `whiten_over` "tokens" (REINFORCE++-baseline as verl/OpenRLHF: every loss token
    counts) or "rows" (ours: every sequence weighs 1). baseline "none" with
    whiten False is plain REINFORCE: the advantage is the reward as it is.
    """
    del values_BxT
    kw = dict(baseline=baseline, eps=eps, valid_B=valid_B)
    if whiten and whiten_over == "tokens":
        return adv_lib.reinforce_pp_token_advantages(
            rewards_B, group_B, num_groups, mask_BxT, **kw
        ), None
    if whiten_over not in ("tokens", "rows"):
        raise ValueError(f"credit.reinforce_pp.whiten_over = {whiten_over!r}; valid: tokens, rows")
    a = adv_lib.reinforce_pp_advantages(rewards_B, group_B, num_groups, whiten=whiten, **kw)
    return _tokens(a, mask_BxT)


def _needs_critic(c) -> None:
    if not c.critic.enabled:
        raise ValueError("config.credit.name = 'gae' needs a critic: set config.critic.enabled")


@ESTIMATORS.register("gae", check=_needs_critic, gamma=1.0, lam=0.95, whiten=True)
def gae(rewards_B, group_B, valid_B, mask_BxT, *, num_groups, values_BxT, gamma, lam, whiten):
    """PPO's GAE(γ, λ) with the sequence reward on the last response token.

    Returns advantages (whitened over the batch's response tokens when `whiten`)
    and the critic's regression targets R_t = A_t + V_t (before whitening).
    """
    del group_B, num_groups
    m = jnp.asarray(mask_BxT, bool) & jnp.asarray(valid_B, bool)[:, None]
    # Index of each row's last response token; rows without one get no reward.
    t = jnp.arange(m.shape[1])
    last_B = jnp.max(jnp.where(m, t, -1), axis=1)
    token_rewards_BxT = jnp.where(
        t[None, :] == last_B[:, None], jnp.asarray(rewards_B)[:, None], 0.0
    )
    a, returns = adv_lib.gae(token_rewards_BxT, values_BxT, m, gamma=gamma, lam=lam)
    if whiten:
        a = adv_lib.whiten(a, m)
    return a, returns


def transform_names(c) -> list[str]:
    """The credit transforms of `config.credit.transforms`, in order."""
    return [n.strip() for n in c.credit.transforms.split(",") if n.strip()]


def apply_transforms(names: list[str], adv_BxT, batch, hparams, *, step: int = 0):
    """Applies the token transforms `names` in order.

    Args:
      names: TRANSFORMS names.
      adv_BxT: the estimator's advantages.
      batch: the Batch (fields by name); rewards_B are the estimator's input.
      hparams: name -> that transform's hyperparameters.
      step: the RL step (for transforms registered with `uses_step`).
    Returns:
      adv_BxT after every transform. ValueError if one needs a missing field.
    """
    for name in names:
        TRANSFORMS.check_requires(name, batch)
        entry = TRANSFORMS.get(name)
        kw = {"step": step} if entry.uses_step else {}
        adv_BxT = entry.fn(adv_BxT, batch, **hparams[name], **kw)
    return adv_BxT


def assign(
    batch,
    *,
    estimator: str,
    hparams,
    transforms: list[str],
    step: int,
    num_groups: int,
    keep_outcome: bool = False,
):
    """The credit stage: the estimator's advantages, then the transforms; a new Batch.

    Args:
      batch: the scored Batch (rewards_B, group_B, valid_B, mask_BxT; old_values_BxT
        for "gae").
      estimator: an ESTIMATORS name.
      hparams: name -> hyperparameters, for the estimator and every transform.
      transforms: TRANSFORMS names, in order.
      step: the RL step.
      num_groups: a static upper bound on the group ids.
      keep_outcome: also keep the estimator's advantages before the transforms
        (extra field `outcome_adv_BxT`, for `log.grad_split`).
    Returns:
      The Batch with adv_BxT (float32) and, for estimators that return them, returns_BxT.
    """
    adv, returns = ESTIMATORS.get(estimator).fn(
        batch.rewards_B,
        batch.group_B,
        batch.valid_B,
        batch.mask_BxT,
        num_groups=num_groups,
        values_BxT=batch.old_values_BxT,
        **hparams[estimator],
    )
    outcome = np.asarray(adv, np.float32)
    if transforms:
        adv = apply_transforms(transforms, adv, batch, hparams, step=step)
    returns = None if returns is None else np.asarray(returns, np.float32)
    batch = batch.replace(adv_BxT=np.asarray(adv, np.float32), returns_BxT=returns)
    return batch.with_extra({"outcome_adv_BxT": outcome}) if keep_outcome else batch
