"""The RL step's score, credit and update stages over a run's parts (`rl.parts.Parts`).

`RLSteps(parts)` builds the jitted update programs and gives the trainer's loop
three calls per step, each on the current train state:

  score(state, groups, fields, step) -> Batch    log-probs, signals, shaped rewards, values
  credit(batch, step, num_groups) -> Batch       the estimator and the token transforms
  update(state, batch, step) -> (state, metrics) ppo_epochs x num_minibatches updates

Another trainer kind gives the same three calls over the same parts
(`pipeline.dpo.DPOSteps`: preference pairs and DPO updates) and runs in the same
loop (`rl.trainer.Trainer`).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rlvr_jax import distributed, sharding
from rlvr_jax.core.losses import kl_in_reward
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import build, credit, objectives, signals
from rlvr_jax.rl.batch import Batch
from rlvr_jax.rl.config import transform_names
from rlvr_jax.rl.critic import calibration_metrics
from rlvr_jax.rl.methods import teacher_dists
from rlvr_jax.rl.parts import Parts
from rlvr_jax.rl.step_metrics import reduce_update_metrics
from rlvr_jax.rl.update import RLState, make_update
from rlvr_jax.rollout import Groups
from rlvr_jax.run.guard import param_health

# Training rows are trimmed to their used columns, rounded up to this: few shapes, few compiles.
LENGTH_MULTIPLE = 32


def trimmed(groups: Groups, multiple: int = LENGTH_MULTIPLE) -> Groups:
    """`groups` trimmed to the columns any process uses (a collective): one width on
    every process, as the update is one program over all hosts' rows."""
    span = groups.used_span() or (0, groups.tokens.shape[1])
    lo, hi = distributed.max_over_processes(np.array([-span[0], span[1]]))
    return groups.trim(multiple, span=(-int(lo), int(hi)))


def loss_consts(c) -> dict:
    """Run constants of the policy loss: an external teacher's output kernel (opd_full_kl)."""
    if "teacher_kernel_DxV" not in objectives.POLICY_LOSSES.get(c.loss.name).requires:
        return {}
    kernel = teacher_dists.teacher_output_kernel(c)
    return {} if kernel is None else {"teacher_kernel_DxV": kernel}


class RLSteps:
    """The RL score, credit and update stages, with the update programs they run."""

    def __init__(self, parts: Parts):
        self.parts = p = parts
        c = p.config
        critic = p.critic
        kw = dict(
            constant=c.loss.constant or c.rollout.max_new_tokens,  # per non-empty row
            critic_graphdef=None if critic is None else critic.graphdef,
            critic_optimizer=None if critic is None else critic.optimizer,
            value_clip=c.critic.value_clip,
            critic_sigma_ratio=c.critic.sigma_ratio,
            loss_consts=loss_consts(c),
            mesh=p.mesh,
            rules=p.rules,
            grad_split=c.log.grad_split,
        )
        spec = build.loss_spec(c)
        self.update_fn = make_update(p.graphdef, p.optimizer, spec, **kw)
        self.update_critic_only = (
            make_update(p.graphdef, p.optimizer, spec, train_policy=False, **kw)
            if c.critic.enabled and c.critic.warmup_steps
            else None
        )

    def score(
        self, state: RLState, groups: Groups, fields: dict[str, np.ndarray], step: int
    ) -> Batch:
        """The score stage: the batch of `groups` with log-probs, signals, shaped rewards, values.

        Args:
          state: the current train state (its policy scores the rows).
          groups: the selected rows; fields: the scheduler's per-row fields.
          step: the RL step (0-based).
        """
        del step
        p = self.parts
        c = p.config
        g = trimmed(groups)
        mask = g.response_mask & g.valid[:, None]
        if c.reward.mask_truncated:
            mask &= g.stopped[:, None]
        ctx = p.score_ctx.with_policy(params=state.params)
        ctx.step_cache.clear()
        ctx.metrics.clear()
        args = (g.tokens, g.attention_mask)
        old = g.behaviour_logps
        if c.loss.recompute_old_logps:
            old = np.where(mask, ctx.policy.logps(*args), 0.0).astype(np.float32)
        batch = batch_lib.from_groups(g, mask, old, fields)
        if ctx.reference is not None:
            ref = np.where(mask, ctx.reference.logps(*args), 0.0).astype(np.float32)
            batch = batch.replace(ref_logps_BxT=ref)
        names = signals.signal_names(c)
        batch = signals.compute(ctx, g, batch, names, {n: c.score[n].to_dict() for n in names})
        rewards = batch.rewards_B
        if c.loss.kl_reward_coef:  # r − β Σ_t KL_t, the estimator of loss.kl_kind
            rewards = kl_in_reward(
                rewards,
                batch.old_logps_BxT,
                batch.ref_logps_BxT,
                mask,
                beta=c.loss.kl_reward_coef,
                kind=c.loss.kl_kind,
                k3_cap=c.loss.kl_clamp,
            )
        batch = batch.replace(rewards_B=np.asarray(rewards, np.float32))
        if p.critic is not None:
            critic = (state.critic_params, p.critic.rest)
            values = signals.map_row_chunks(p.critic.value_fn, critic, args, chunk=p.chunk)
            batch = batch.replace(old_values_BxT=np.where(mask, values, 0.0).astype(np.float32))
            ctx.metrics.update(  # Brier score / ECE of the critic, every step
                calibration_metrics(
                    values,
                    mask,
                    g.correct,
                    loss=c.critic.loss,
                    v_min=c.critic.v_min,
                    v_max=c.critic.v_max,
                )
            )
        return batch

    def credit(self, batch: Batch, step: int, num_groups: int) -> Batch:
        """The credit stage: the configured estimator and token transforms (adv_BxT)."""
        c = self.parts.config
        names = transform_names(c)
        hparams = {n: c.credit[n].to_dict() for n in [c.credit.name, *names]}
        return credit.assign(
            batch,
            estimator=c.credit.name,
            hparams=hparams,
            transforms=names,
            step=step,
            num_groups=num_groups,
            keep_outcome=c.log.grad_split,
        )

    def update(self, state: RLState, batch: Batch, step: int) -> tuple[RLState, dict[str, Any]]:
        """The update stage: ppo_epochs × num_minibatches updates; the step's averaged metrics.

        Each update is dispatched before the previous one's metrics are read, so
        the host never waits on the device between updates.
        """
        p = self.parts
        c = p.config
        rows = batch.rows()
        n_rows = len(rows.tokens_BxT)
        per_mb = n_rows // c.train.num_minibatches
        micro = p.chunk
        mb_sharding = sharding.batch_sharding(p.mesh, batch_dim=1)
        update = self.update_fn
        if self.update_critic_only is not None and step < c.critic.warmup_steps:
            update = self.update_critic_only
        read: list[dict] = []
        pending, n_updates = None, 0

        def check_and_read(metrics, k):
            metrics = jax.device_get(metrics)
            health = metrics.pop("health")
            # Before anything of this step can be saved: parameters and grad norm sane.
            p.io.check_update(None, metrics, step + 1, k, health=health)
            read.append(metrics)

        for epoch in range(c.train.ppo_epochs):
            rng = np.random.default_rng([c.seed, step, epoch])
            perm = rng.permutation(n_rows)
            for k in range(c.train.num_minibatches):
                idx = perm[k * per_mb : (k + 1) * per_mb]
                shape = (per_mb // micro, micro)
                mb = jax.tree.map(lambda x, i=idx, s=shape: x[i].reshape(s + x.shape[1:]), rows)
                # Global micro-batch i: every process's micro-batch i, concatenated.
                mb = distributed.host_local_to_global(mb, p.mesh, mb_sharding)
                state, metrics = update(state, p.rest, _critic_rest(p), mb)
                # Parameter health is dispatched with the update and read with its metrics.
                params = {"policy": state.params, "critic": state.critic_params}
                metrics = dict(metrics, health=param_health(params))
                if pending is not None:
                    check_and_read(*pending)
                pending, n_updates = (metrics, n_updates), n_updates + 1
        check_and_read(*pending)
        return state, reduce_update_metrics(read)


def _critic_rest(p: Parts):
    return None if p.critic is None else p.critic.rest
