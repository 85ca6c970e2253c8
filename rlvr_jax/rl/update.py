"""Update stage: the RL train state and one jitted optimizer update with gradient accumulation.

`RLState` is the one pytree the trainer steps and checkpoints: policy params and
optimizer state, optionally the critic's, the RL step count and the run's base
PRNG key. `make_update` builds `update(state, rest, critic_rest, mb) -> (state,
metrics)` for one minibatch stacked as [n_micro, rows, ...]: it computes the
loss denominator (and a loss's `objectives.minibatch_stats`) over the whole
minibatch first, accumulates the gradients of
the micro-batches with `lax.scan` (each normalised by that global denominator,
so the sum equals the full-minibatch gradient), then applies the optimizer.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax import lax

from rlvr_jax import sharding
from rlvr_jax.core.losses import aggregate, aggregate_with_denominator
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.optim import build_optimizer  # noqa: F401 (re-exported: the critic's AdamW)
from rlvr_jax.rl import objectives


@struct.dataclass
class RLState:
    """Everything an RL run updates, as one pytree (checkpointed as a whole)."""

    params: Any  # nnx.State of the policy's nnx.Param variables
    opt_state: Any
    critic_params: Any  # nnx.State of the critic's params, or None
    critic_opt_state: Any  # or None
    step: jax.Array  # int32: RL steps completed
    rng: jax.Array  # uint32[2]: the run's base key (per-step keys are folded in)


def make_scorer(graphdef, *, mesh=None, rules="fsdp"):
    """Jitted `(params, rest, tokens_BxT, attention_mask_BxT) -> logps_BxT` (reference / old).

    With `mesh`, params keep their shardings and rows are split over (data, fsdp).
    """

    def score(params, rest, tokens_BxT, attention_mask_BxT):
        return token_logps(nnx.merge(graphdef, params, rest), tokens_BxT, attention_mask_BxT)

    return _jit_rows(score, mesh, rules)


def make_value_fn(critic_graphdef, *, mesh=None, rules="fsdp"):
    """Jitted `(critic_params, critic_rest, tokens_BxT, attention_mask_BxT) -> values_BxT`.

    With `mesh`, as in `make_scorer`.
    """

    def values(params, rest, tokens_BxT, attention_mask_BxT):
        return nnx.merge(critic_graphdef, params, rest)(tokens_BxT, attention_mask_BxT)

    return _jit_rows(values, mesh, rules)


def _jit_rows(fn, mesh, rules):
    """jit(fn(params, rest, tokens_BxT, mask_BxT) -> [B, T]), its rows split over a mesh."""
    if mesh is None:
        return jax.jit(fn)
    rows = sharding.batch_sharding(mesh)
    jitted = jax.jit(sharding.with_rules(fn, mesh, rules), out_shardings=rows)

    def call(params, rest, tokens_BxT, mask_BxT):
        return jitted(params, rest, *jax.device_put((tokens_BxT, mask_BxT), rows))

    return call


def _scan_grads(loss_fn, params, micro_batches):
    """Σ over micro-batches of (loss, sums, grad of loss): one `lax.scan`."""

    def body(carry, mb):
        (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
        acc_loss, acc_sums, acc_grads = carry
        acc = jax.tree.map(jnp.add, (acc_loss, acc_sums, acc_grads), (loss, sums, grads))
        return acc, None

    first = jax.tree.map(lambda x: x[0], micro_batches)
    (_, sums0), _ = jax.eval_shape(jax.value_and_grad(loss_fn, has_aux=True), params, first)
    zeros = (
        jnp.zeros((), jnp.float32),
        jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), sums0),
        jax.tree.map(jnp.zeros_like, params),
    )
    (loss, sums, grads), _ = lax.scan(body, zeros, micro_batches)
    return loss, sums, grads


def _policy_loss_fn(graphdef, spec: objectives.LossSpec, loss_consts):
    """(params, rest, mb, denom, minibatch) -> (loss, sums): the policy loss of a micro-batch."""
    with_entropy = bool(spec.entropy_coef)
    # Losses over whole next-token distributions (rl.methods.distill: opd_full_kl,
    # opd_topk_kl) also get the student's final hidden states and output kernel, and
    # the teacher's kernel (`loss_consts`, else the student's own, stop-gradient).
    needs_hidden = "hidden_BxTxD" in objectives.POLICY_LOSSES.get(spec.name).requires
    loss_consts = dict(loss_consts or {})

    def policy_loss_fn(params, rest, mb, denom, minibatch):
        model = nnx.merge(graphdef, params, rest)
        tokens, attn = mb["tokens_BxT"], mb["attention_mask_BxT"]
        out = token_logps(
            model, tokens, attn, with_entropy=with_entropy, return_hidden=needs_hidden
        )
        if needs_hidden:
            *out, hidden = out
            out = tuple(out) if with_entropy else out[0]
            kernel = model.output_kernel()
            mb = mb.with_extra(
                dict(
                    hidden_BxTxD=hidden,
                    output_kernel_DxV=kernel,
                    teacher_kernel_DxV=jax.lax.stop_gradient(kernel),
                    **loss_consts,
                )
            )
        logps, ent = out if with_entropy else (out, None)
        return objectives.policy_loss(spec, logps, mb, denom, ent, minibatch)

    return policy_loss_fn


OUTCOME = "outcome_adv_BxT"  # the estimator's advantages before the credit transforms


def _split_grad_norms(graphdef, params, rest, mb, flat_mask) -> dict[str, jax.Array]:
    """‖g‖ of the policy-gradient direction of the outcome advantages and of the dense rest.

    g_X = −∇θ Σ_t A^X_t ℓ_θ,t / N over the minibatch's N loss tokens, for A^X the
    estimator's advantages (`OUTCOME`, before the transforms) and the part the
    transforms added (adv − outcome): at π_θ = π_old (the step's first update)
    they are the two terms of the surrogate's gradient, whatever the loss's clip
    (the loss's other terms, KL and entropy, are in neither). Two more backward
    passes per update; `log.grad_split` turns them on.
    """
    n_tokens = jnp.maximum(jnp.sum(flat_mask, dtype=jnp.float32), 1.0)

    def pg_loss(part):
        def fn(p, b):
            model = nnx.merge(graphdef, p, rest)
            logps = token_logps(model, b["tokens_BxT"], b["attention_mask_BxT"])
            outcome = b[OUTCOME]
            adv = outcome if part == "outcome" else b["adv_BxT"] - outcome
            loss = -jnp.sum(jnp.where(b["mask_BxT"], adv * logps, 0.0)) / n_tokens
            return loss, {}

        return fn

    norms = {}
    for part in ("outcome", "dense"):
        _, _, grads = _scan_grads(pg_loss(part), params, mb)
        norms[f"grad_split/{part}_norm"] = optax.tree.norm(grads)
    ratio = norms["grad_split/dense_norm"] / jnp.maximum(norms["grad_split/outcome_norm"], 1e-12)
    norms["grad_split/dense_over_outcome"] = ratio
    return norms


def _critic_loss_fn(critic_graphdef, value_clip: float, sigma_ratio: float):
    """(params, rest, mb, denom) -> (loss, sums): the critic's loss of a micro-batch."""

    def critic_loss_fn(params, rest, mb, denom):
        critic = nnx.merge(critic_graphdef, params, rest)
        loss_BxT = critic.loss_BxT(mb, value_clip=value_clip, sigma_ratio=sigma_ratio)
        loss = aggregate_with_denominator(loss_BxT, mb["mask_BxT"], "token-mean", denom)
        return loss, {"value_loss": jnp.sum(loss_BxT)}

    return critic_loss_fn


def _policy_step(policy_loss_fn, optimizer, spec, constant, state, rest, mb, flat_mask):
    """One policy update on a minibatch: (params, opt state, loss, sums, grads)."""
    n, rows = mb["mask_BxT"].shape[:2]
    # Over the whole minibatch, before the micro-batches: the denominator and the
    # loss's own statistics (GAPO's Ā), so the split cannot change the gradient.
    denom = objectives.denominator(spec, flat_mask, constant)
    flat = jax.tree.map(lambda x: x.reshape((n * rows,) + x.shape[2:]), mb)
    stats = objectives.minibatch_stats(spec, flat)
    params = state.params
    loss, sums, grads = _scan_grads(
        lambda p, b: policy_loss_fn(p, rest, b, denom, stats), params, mb
    )
    updates, opt_state = optimizer.update(grads, state.opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, sums, grads


def _critic_step(critic_loss_fn, optimizer, state, critic_rest, mb, flat_mask):
    """One critic update on a minibatch: (params, opt state, value loss, grad norm)."""
    zeros = jnp.zeros_like(flat_mask, jnp.float32)
    denom = aggregate(zeros, flat_mask, "token-mean")[1]
    params, opt_state = state.critic_params, state.critic_opt_state
    vloss, _, grads = _scan_grads(lambda p, b: critic_loss_fn(p, critic_rest, b, denom), params, mb)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, vloss, optax.tree.norm(grads)


def make_update(
    graphdef,
    optimizer: optax.GradientTransformation,
    spec: objectives.LossSpec,
    *,
    constant: float = 0.0,
    critic_graphdef=None,
    critic_optimizer: optax.GradientTransformation | None = None,
    value_clip: float = 0.2,
    critic_sigma_ratio: float = 0.75,
    train_policy: bool = True,
    mesh: jax.sharding.Mesh | None = None,
    rules="fsdp",
    loss_consts: dict[str, Any] | None = None,
    grad_split: bool = False,
):
    """One jitted optimizer update on a minibatch; `state` is donated.

    Args:
      graphdef: the policy's graphdef (`nnx.split(model, nnx.Param, ...)`).
      optimizer: the policy optimizer.
      spec: the policy loss.
      constant: aggregation "constant"'s normaliser per non-empty row (L_max).
      critic_graphdef, critic_optimizer: the critic's, or None for no critic.
      value_clip: clipped value loss range (the "mse" critic's).
      critic_sigma_ratio: HL-Gauss σ in bin widths (the "hl_gauss" critic's).
      train_policy: False updates only the critic (critic warm-up).
      mesh: run on this device mesh (see rlvr_jax.sharding): the state keeps the
        shardings of `sharding.rl_state_shardings`, minibatch rows are split over
        (data, fsdp) (rows per micro-batch must be a multiple of
        `sharding.batch_shards(mesh)`), metrics come back replicated.
      rules: sharding rules (preset name or pairs) when `mesh` is given.
      grad_split: also log `_split_grad_norms` (`mb` then holds `OUTCOME`).
    Returns:
      `update(state, rest, critic_rest, mb) -> (state, metrics)`. `mb` holds
      [n_micro, rows, T] arrays: tokens_BxT, attention_mask_BxT, mask_BxT,
      old_logps_BxT, adv_BxT, and as needed ref_logps_BxT, behaviour_logps_BxT,
      old_values_BxT, returns_BxT. Metrics: loss, grad_norm and the critic's
      value_loss and critic_grad_norm (per update); "token_sums", the loss's
      per-token diagnostics summed over the minibatch's loss tokens (their count
      "tokens"); "subset_sums", {subset: {"tokens": count, name: sum}} of its
      per-subset ones (`objectives.SUBSETS`). `rl.step_metrics` reduces them.
    """
    policy_loss_fn = _policy_loss_fn(graphdef, spec, loss_consts)
    critic_loss_fn = _critic_loss_fn(critic_graphdef, value_clip, critic_sigma_ratio)

    def update(state: RLState, rest, critic_rest, mb):
        n, rows, t = mb["mask_BxT"].shape
        flat_mask = mb["mask_BxT"].reshape(n * rows, t)
        metrics = {"token_sums": {"tokens": jnp.sum(flat_mask, dtype=jnp.float32)}}
        params, opt_state = state.params, state.opt_state
        if train_policy and grad_split:  # at the update's starting parameters
            metrics.update(_split_grad_norms(graphdef, params, rest, mb, flat_mask))
        if train_policy:
            params, opt_state, loss, sums, grads = _policy_step(
                policy_loss_fn, optimizer, spec, constant, state, rest, mb, flat_mask
            )
            subsets = sums.pop(objectives.SUBSETS, None)
            metrics["token_sums"].update(sums)
            if subsets is not None:
                metrics["subset_sums"] = subsets
            metrics.update(loss=loss, grad_norm=optax.tree.norm(grads))
        critic_params, critic_opt_state = state.critic_params, state.critic_opt_state
        if critic_graphdef is not None:
            critic_params, critic_opt_state, vloss, grad_norm = _critic_step(
                critic_loss_fn, critic_optimizer, state, critic_rest, mb, flat_mask
            )
            metrics.update(value_loss=vloss, critic_grad_norm=grad_norm)
        new_state = state.replace(
            params=params,
            opt_state=opt_state,
            critic_params=critic_params,
            critic_opt_state=critic_opt_state,
        )
        return new_state, metrics

    if mesh is None:
        return jax.jit(update, donate_argnums=0)
    return _jit_sharded(update, mesh, rules)


def _jit_sharded(update, mesh, rules):
    """`update` jitted with explicit in/out shardings (built once per state structure).

    The returned callable has `.jitted(state, rest, critic_rest)`: the `jax.jit` for
    those structures, which also accepts ShapeDtypeStructs in `.lower(...)` (an
    ahead-of-time memory plan without allocating the model).
    """
    fn = sharding.with_rules(update, mesh, rules)
    compiled = {}

    def jitted(state, rest, critic_rest):
        key = jax.tree.structure((state, rest, critic_rest))
        if key not in compiled:
            state_sh = sharding.rl_state_shardings(state, mesh, rules)
            in_sh = (
                state_sh,
                sharding.tree_shardings(rest, mesh, rules, strict=False),
                sharding.tree_shardings(critic_rest, mesh, rules, strict=False),
                sharding.batch_sharding(mesh, batch_dim=1),
            )
            out_sh = (state_sh, sharding.replicated(mesh))
            compiled[key] = jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh, donate_argnums=0)
        return compiled[key]

    def call(state, rest, critic_rest, mb):
        rows = mb["mask_BxT"].shape[1]
        if rows % sharding.batch_shards(mesh):
            raise ValueError(
                f"{rows} rows per micro-batch do not split over the mesh's "
                f"{sharding.batch_shards(mesh)} batch shards (data x fsdp)"
            )
        return jitted(state, rest, critic_rest)(state, rest, critic_rest, mb)

    call.jitted = jitted
    return call
