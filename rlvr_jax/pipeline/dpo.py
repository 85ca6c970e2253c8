"""The DPO stage: preference pairs from the current policy's verified rollouts.

Each step samples G rollouts for each of B prompts with the current policy
(the RL trainer's select/rollout stages), verifies them, and pairs within
each prompt's group a correct response (chosen) with a wrong one (rejected)
(`core.dpo.preference_pairs`, up to `dpo.pairs_per_group` pairs; groups that
are all right or all wrong give none). The reference π_ref is the stage's
start, frozen. The update minimises the DPO loss (`core.dpo.dpo_loss`, β =
`dpo.beta`) over the step's pairs, `train.ppo_epochs` times.

Paper-fixed (Rafailov et al. 2023): the loss, β, the frozen reference.
Ours: pairs from verified on-policy rollouts (the staged SFT → DPO → RLVR
pipelines of "Locked at the Entrance" give no pair construction); pairs of a
group matched in sampling order; one update per pass over all pairs.

`dpo_trainer(config, workdir)` is the RL trainer's loop over an RL run's parts
(`rl.parts.build_parts`) with DPO's score, credit and update stages (`DPOSteps`),
so it keeps everything else of a run: checkpoints and bitwise resume, SIGTERM,
evaluation, logs, report and export. Multi-process as the RL trainer: each
process pairs its own groups' rows; an update is one program over every
process's pairs (the global [2, P, T] batch: chosen row, rejected row), the
mean over all valid pairs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.core import dpo
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.pipeline.stage_kind import rl_defaults
from rlvr_jax.rl import build, signals
from rlvr_jax.rl.parts import Parts, build_parts
from rlvr_jax.rl.steps import trimmed
from rlvr_jax.rl.trainer import Trainer

_ROW_FIELDS = ("tokens_2xPxT", "attention_mask_2xPxT", "mask_2xPxT")


def dpo_config() -> ml_collections.ConfigDict:
    """An RL config plus `dpo.*`; the RL credit/loss/critic fields are unused. Locked."""
    c = rl_defaults()
    with c.unlocked():
        c.dpo = ml_collections.ConfigDict()
        c.dpo.beta = 0.1  # β (the DPO paper's and TRL's default)
        c.dpo.label_smoothing = 0.0  # ε of conservative DPO (sigmoid loss)
        c.dpo.loss_type = "sigmoid"  # one of core.dpo.LOSS_TYPES
        c.dpo.pairs_per_group = 1  # the most pairs one prompt's group gives (ours)
    c.train.num_minibatches = 1  # one update per pass over the step's pairs
    c.lock()
    return c


def make_dpo_update(graphdef, optimizer, *, beta, label_smoothing, loss_type):
    """Jitted `(state, rest, batch) -> (state, metrics)` on the pairs of one step.

    `batch` holds the P pairs' rows, chosen ([0]) and rejected ([1]): tokens_2xPxT,
    attention_mask_2xPxT, mask_2xPxT (response tokens), ref_logps_2xP (the
    reference's sequence log-probs), and valid_P. The loss is the mean over the
    valid pairs. `state` (an `rl.update.RLState`) is donated.
    """

    def loss_fn(params, rest, b):
        model = nnx.merge(graphdef, params, rest)
        rows = {k: b[k].reshape(-1, b[k].shape[-1]) for k in _ROW_FIELDS}  # [2P, T]
        logps_BxT = token_logps(model, rows["tokens_2xPxT"], rows["attention_mask_2xPxT"])
        seq = dpo.sequence_logps(logps_BxT, rows["mask_2xPxT"])
        p = seq.shape[0] // 2
        ref = b["ref_logps_2xP"]
        total, count, stats = dpo.dpo_loss(
            seq[:p],
            seq[p:],
            ref[0],
            ref[1],
            b["valid_P"],
            beta=beta,
            label_smoothing=label_smoothing,
            loss_type=loss_type,
        )
        return total / jnp.maximum(count, 1.0), (count, stats)

    def update(state, rest, b):
        (loss, (count, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, rest, b
        )
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        n = jnp.maximum(count, 1.0)
        metrics = {f"dpo_{k}": jnp.sum(v) / n for k, v in stats.items()}
        metrics.update(loss=loss, pairs=count, grad_norm=optax.tree.norm(grads))
        return state.replace(params=params, opt_state=opt_state), metrics

    return jax.jit(update, donate_argnums=0)


def check_dpo(config: ml_collections.ConfigDict, mesh) -> None:
    """The `dpo.*` fields and the pairs' split over the mesh; ValueError naming the field."""
    d = config.dpo
    if d.loss_type not in dpo.LOSS_TYPES:
        raise ValueError(f"config.dpo.loss_type = {d.loss_type!r}; valid: {dpo.LOSS_TYPES}")
    if d.beta <= 0 or not 0 <= d.label_smoothing < 0.5 or d.pairs_per_group < 1:
        raise ValueError(
            f"config.dpo: beta = {d.beta} must be > 0, label_smoothing = "
            f"{d.label_smoothing} in [0, 0.5), pairs_per_group = {d.pairs_per_group} >= 1"
        )
    pairs = config.data.prompts_per_step * d.pairs_per_group
    shards = sharding.batch_shards(mesh)
    if pairs % shards:
        raise ValueError(
            f"config.data.prompts_per_step x config.dpo.pairs_per_group = {pairs} pairs "
            f"per step must be a multiple of the mesh's {shards} batch shards"
        )


class DPOSteps:
    """DPO's score (verified pairs + reference log-probs), credit (none) and update stages
    over an RL run's parts; `Trainer(parts, DPOSteps(parts))` runs them."""

    def __init__(self, parts: Parts):
        self.parts = parts
        config = parts.config
        check_dpo(config, parts.mesh)
        d = config.dpo
        graphdef, params, _ = nnx.split(parts.model, nnx.Param, ...)
        # π_ref: the stage's start (the model as built, before any checkpoint restore).
        self.reference = jax.tree.map(jnp.copy, params)
        self.update_fn = make_dpo_update(
            graphdef,
            build.policy_optimizer(config),
            beta=float(d.beta),
            label_smoothing=float(d.label_smoothing),
            loss_type=d.loss_type,
        )

    # The RL stages' counterparts: score builds the preference pairs, credit has nothing
    # to assign, update takes DPO steps. (The batch is DPO's own dict, not rl.Batch.)
    def score(self, state, groups, fields, step) -> dict[str, np.ndarray]:
        """This process's pairs as [2, P, T] rows (chosen, rejected) with reference log-probs."""
        del state, fields, step
        p = self.parts
        g = trimmed(groups)  # to steps.LENGTH_MULTIPLE columns, as the RL rows
        chosen, rejected, valid = dpo.preference_pairs(
            g.correct,
            g.group,
            g.valid,
            num_groups=g.num_groups,
            pairs_per_group=p.config.dpo.pairs_per_group,
        )
        rows = np.concatenate([chosen, rejected])
        tokens, attn = g.tokens[rows], g.attention_mask[rows]
        mask = (g.response_mask & g.valid[:, None])[rows]
        ref_BxT = signals.map_row_chunks(
            p.score_ctx.policy.fn, (self.reference, p.rest), (tokens, attn), chunk=len(rows)
        )
        ref_B = np.asarray(dpo.sequence_logps(ref_BxT, mask), np.float32)
        out = dict(zip(_ROW_FIELDS, (tokens, attn, mask), strict=True), ref_logps_2xP=ref_B)
        out = {k: x.reshape(2, len(valid), *x.shape[1:]) for k, x in out.items()}
        return dict(out, valid_P=valid)

    def credit(self, batch, step, num_groups):
        del step, num_groups
        return batch

    def update(self, state, b: dict[str, np.ndarray], step: int) -> tuple[Any, dict[str, Any]]:
        p = self.parts
        if not distributed.agree(b["valid_P"].any()):
            return state, {"pairs": 0.0}
        # The global batch: every process's pairs, concatenated (pairs on the batch axes).
        valid = b.pop("valid_P")
        b = distributed.host_local_to_global(b, p.mesh, sharding.batch_sharding(p.mesh, 1))
        b["valid_P"] = distributed.host_local_to_global(valid, p.mesh)
        totals: dict[str, float] = {}
        epochs = p.config.train.ppo_epochs
        for epoch in range(epochs):
            state, metrics = self.update_fn(state, p.rest, b)
            metrics = jax.device_get(metrics)
            # Before anything of this step can be saved: parameters and grad norm sane.
            p.io.check_update(state, metrics, step + 1, epoch)
            for k, v in metrics.items():
                totals[k] = totals.get(k, 0.0) + float(v) / epochs
        return state, totals


def dpo_trainer(config: ml_collections.ConfigDict, workdir, allow_config_change=()) -> Trainer:
    """The DPO stage's trainer: an RL run's parts with DPO's steps."""
    parts = build_parts(config, workdir, allow_config_change)
    return Trainer(parts, DPOSteps(parts))
