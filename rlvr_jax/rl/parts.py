"""What an RL run is built from: `build_parts(config, workdir)` makes them, `Trainer` runs them.

The parts are the run's directory (`RunIO`: checkpoints, logs), its mesh, the
policy and tokenizer placed on it, the task and its prompt iterator, the sampler,
the scheduler of the select stage (`scheduling.select.Select`), the score stage's context
(the policy's and the reference's scorers, a teacher loaded on demand), the
critic when there is one, and the initial train state. Nothing here runs a step:
the step programs (`rl.steps.RLSteps`, or DPO's) are built from the parts, and
the trainer's loop (`rl.trainer.Trainer`) calls them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.data.pipeline import prompt_batches
from rlvr_jax.data.sources import TaskSource
from rlvr_jax.rl import build, signals
from rlvr_jax.rl.config import default_config
from rlvr_jax.rl.critic import Critic
from rlvr_jax.rl.update import RLState, build_optimizer, make_scorer, make_value_fn
from rlvr_jax.rl.validate import validate
from rlvr_jax.rollout import EVALUATORS, ROLLOUTS, Groups, Request, RolloutContext
from rlvr_jax.run.run_io import RunIO
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.scheduling.select import Select


@dataclasses.dataclass
class CriticParts:
    """The value model: its module structure and non-parameter state, optimizer, scorer.

    Its parameters and optimizer state live in the train state (`RLState`).
    """

    graphdef: Any
    rest: Any  # the critic's non-parameter state, sharded on the mesh
    optimizer: optax.GradientTransformation
    value_fn: Any  # (params, rest), (tokens, attention) -> values on this host's rows


@dataclasses.dataclass
class Parts:
    """Everything an RL run is built from (see the module docstring).

    Attributes:
      config: the validated RL config; io: the run directory (`RunIO`).
      mesh, rules: the device mesh every model, state and program lives on
        (config.mesh) and its sharding rules.
      processes: the number of processes (hosts) of the run.
      model, tokenizer, pad_id: the policy (the sampler's model) and its tokenizer.
      task, prompts: the task and this process's prompt iterator (checkpointed).
      sampler, sampling: the rollout sampler and its sampling parameters.
      rollout_cache: what the rollout plug-in builds once (adapters, pools, ...).
      frozen_state: the initial policy's state when the task has its own
        evaluation against it (SpyRL's games), else None.
      selector: the select stage's scheduler, built from the initial weights.
      graphdef, rest: the policy's module structure and non-parameter state.
      score_ctx: the score stage's context (policy and reference scorers).
      optimizer: the policy's optimizer.
      critic: the value model (None without one).
      state: the initial train state (policy and critic parameters, optimizer
        states, step, rng), sharded on the mesh; a checkpoint replaces it on resume.
      chunk: this process's rows per micro-batch (its share of
        `train.micro_batch_size`), for scoring and updates.
    """

    config: ml_collections.ConfigDict
    io: RunIO
    mesh: Any
    rules: str
    processes: int
    model: nnx.Module
    tokenizer: Any
    pad_id: int
    task: Any
    prompts: Any
    sampler: Sampler
    sampling: SamplingParams
    rollout_cache: dict[str, Any]
    frozen_state: Any
    selector: Select
    graphdef: Any
    rest: Any
    score_ctx: signals.ScoreContext
    optimizer: optax.GradientTransformation
    critic: CriticParts | None
    state: RLState
    chunk: int


def check_processes(c: ml_collections.ConfigDict, mesh) -> None:
    """Raises (naming the config field) for what a multi-process run cannot split."""
    n = jax.process_count()
    if n == 1:
        return
    distributed.check_rows_split(mesh)
    d = c.data
    if d.prompts_per_step % n or (d.prompts_per_step // n * d.group_size) % c.train.num_minibatches:
        raise ValueError(
            f"config.data.prompts_per_step = {d.prompts_per_step} over {n} processes: each "
            f"needs an equal share whose rows (x group_size = {d.group_size}) split into "
            f"config.train.num_minibatches = {c.train.num_minibatches}"
        )


def micro_batch_rows(c: ml_collections.ConfigDict) -> int:
    """This process's rows per micro-batch (its share of `train.micro_batch_size`)."""
    rows = c.data.prompts_per_step * c.data.group_size // c.train.num_minibatches
    return (c.train.micro_batch_size or rows) // jax.process_count()


def build_parts(
    config: ml_collections.ConfigDict, workdir: str | Path, allow_config_change=()
) -> Parts:
    """Validates `config`, opens (or resumes) its run directory and builds the run's parts.

    Args:
      config: an RL config (`rl.config`).
      workdir: the run directory.
      allow_config_change: config fields a resume may change (`run_io.RunIO`).
    Returns:
      The `Parts`; the train state is the initial one (`Trainer.run` restores a
      checkpoint over it).
    """
    validate(config)
    c = config
    defaults = json.loads(default_config().to_json())  # fields added since a run began
    io = RunIO(workdir, config, allow_config_change=allow_config_change, defaults=defaults)
    mesh, rules = build.build_mesh(c), c.mesh.rules
    check_processes(c, mesh)
    processes = jax.process_count()
    r = build_rollout_parts(c, mesh, processes)
    model, tokenizer, pad_id, task, prompts = r.model, r.tokenizer, r.pad_id, r.task, r.prompts
    # The frozen opponent of a task's own evaluation (SpyRL's games): the initial policy.
    frozen_state = None
    if c.task.name in EVALUATORS:
        frozen_state = jax.tree.map(jnp.copy, nnx.state(model))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    chunk = micro_batch_rows(c)
    score_ctx = _score_context(c, model, tokenizer, task, graphdef, params, rest, mesh, chunk)
    optimizer = build.policy_optimizer(c)
    critic, critic_params, critic_opt = None, None, None
    if c.critic.enabled:
        critic, critic_params, critic_opt = _build_critic(c, graphdef, params, rest, mesh)
    state = RLState(
        params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        critic_params=critic_params,
        critic_opt_state=critic_opt,
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(c.seed),
    )
    return Parts(
        config=c,
        io=io,
        mesh=mesh,
        rules=rules,
        processes=processes,
        model=model,
        tokenizer=tokenizer,
        pad_id=pad_id,
        task=task,
        prompts=prompts,
        sampler=r.sampler,
        sampling=r.sampling,
        rollout_cache=r.rollout_cache,
        frozen_state=frozen_state,
        selector=r.selector,
        graphdef=graphdef,
        rest=rest,
        score_ctx=score_ctx,
        optimizer=optimizer,
        critic=critic,
        state=sharding.shard_rl_state(state, mesh, rules),
        chunk=chunk,
    )


@dataclasses.dataclass
class RolloutParts:
    """What the select and rollout stages run on (`Parts` holds the same fields): the
    config, mesh, policy, tokenizer, task, prompt iterator, sampler, sampling parameters,
    the rollout plug-in's cache and the scheduler. A rollout worker in its own process
    (`rl.async_process`) builds only these."""

    config: ml_collections.ConfigDict
    mesh: Any
    model: nnx.Module
    tokenizer: Any
    pad_id: int
    task: Any
    prompts: Any
    sampler: Sampler
    sampling: SamplingParams
    rollout_cache: dict[str, Any]
    selector: Select


def build_rollout_parts(c: ml_collections.ConfigDict, mesh, processes: int) -> RolloutParts:
    """The policy (initial weights, sharded on `mesh`), task, prompts, sampler and
    scheduler of config `c` (`build_parts`'s, built the same way in a rollout process)."""
    model, tokenizer = build.build_policy(c)
    nnx.update(model, sharding.shard_state(nnx.state(model), mesh, c.mesh.rules))
    task = build.build_task(c)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler, sampling = make_sampler(c, model, tokenizer, pad_id, mesh)
    prompts = prompt_batches(
        TaskSource(task, c.task.train_split, size=c.task.train_size),
        batch_size=c.data.prompts_per_step // processes,  # this process's share
        seed=c.seed,
        group_size=c.data.group_size,
    )
    # The scheduler, built from the initial weights (its prompt embeddings).
    selector = Select(c, model, tokenizer, task, prompts, pad_id, processes, mesh=mesh)
    return RolloutParts(c, mesh, model, tokenizer, pad_id, task, prompts, sampler, sampling, {},
                        selector)  # fmt: skip


def rollout_context(p, request: Request, key: jax.Array, sampler=None) -> RolloutContext:
    """What the rollout plug-in gets from parts `p` (`Parts` or `RolloutParts`): `sampler`
    (default the run's) and its model's state."""
    c = p.config
    sampler = p.sampler if sampler is None else sampler
    return RolloutContext(
        sampler,
        p.tokenizer,
        p.task,
        nnx.state(sampler.model),
        p.sampling,
        key,
        request,
        overlong_cache=c.reward.overlong_cache,
        overlong_penalty=c.reward.overlong_penalty,
        cache=p.rollout_cache,
    )


def rollout_stage(p, request: Request, key: jax.Array, sampler=None) -> Groups:
    """The rollout stage on parts `p`: the configured plug-in generates and scores
    `request`'s rows with `sampler` (default the run's)."""
    c = p.config
    ctx = rollout_context(p, request, key, sampler)
    return ROLLOUTS.get(c.rollout.name).fn(ctx, **c.rollout[c.rollout.name].to_dict())


def make_sampler(c, model, tokenizer, pad_id: int, mesh) -> tuple[Sampler, SamplingParams]:
    """The rollout sampler of `model` on the mesh (its KV-cache budget) and the sampling
    parameters (also the asynchronous rollout worker's own sampler, `rl.async_loop`)."""
    sampler = Sampler(
        model,
        pad_id=pad_id,
        mesh=mesh,
        rules=c.mesh.rules,
        cache_bytes=c.rollout.cache_gib * 2**30 or None,
        cache_dtype=c.rollout.cache_dtype or None,
        engine=c.rollout.engine,
        page_size=c.rollout.page_size,
        decode_slots=c.rollout.decode_slots,
        prefill_chunk=c.rollout.prefill_chunk,
        paged_kernel=c.rollout.paged_kernel,
        paged_block_pages=c.rollout.paged_block_pages,
    )
    sampling = SamplingParams(
        temperature=c.rollout.temperature,
        top_p=c.rollout.top_p,
        top_k=c.rollout.top_k,
        max_new_tokens=c.rollout.max_new_tokens,
        stop_token_ids=tokenizer.stop_ids,
    )
    return sampler, sampling


def _score_context(c, model, tokenizer, task, graphdef, params, rest, mesh, chunk):
    """The policy's scorer on this host's rows, and the frozen reference's when KL needs it."""
    scorer = make_scorer(graphdef, mesh=mesh, rules=c.mesh.rules)
    scorer = distributed.on_host_rows(scorer, mesh)
    policy = signals.Scorer(scorer, graphdef, params, rest, model.config, chunk)
    # The reference policy for KL: the initial weights, frozen.
    reference = None
    if c.loss.kl_coef > 0 or c.loss.kl_reward_coef > 0:
        reference = dataclasses.replace(policy, params=jax.tree.map(jnp.copy, params))
    domain = c.model.domain if c.model.source == "warm_start" else ""
    return signals.ScoreContext(tokenizer, task, policy, reference, mesh, c.mesh.rules, domain)


def _build_critic(c, graphdef, params, rest, mesh):
    """(CriticParts, initial critic params, their optimizer state): a copy of the initial
    policy's trunk with a value head (scalar "mse" or categorical "hl_gauss")."""
    trunk = nnx.merge(graphdef, jax.tree.map(jnp.copy, params), rest)
    cc = c.critic
    head = dict(loss=cc.loss, num_bins=cc.num_bins, v_min=cc.v_min, v_max=cc.v_max)
    critic_graphdef, critic_params, critic_rest = nnx.split(
        Critic(trunk, seed=c.seed, **head), nnx.Param, ...
    )
    o = c.optimizer
    optimizer = build_optimizer(
        cc.lr, build.total_updates(c), b1=o.b1, b2=o.b2, clip_norm=o.clip_norm
    )
    critic_opt = optimizer.init(critic_params)
    value_fn = make_value_fn(critic_graphdef, mesh=mesh, rules=c.mesh.rules)
    parts = CriticParts(
        graphdef=critic_graphdef,
        rest=sharding.shard_state(critic_rest, mesh, c.mesh.rules),
        optimizer=optimizer,
        value_fn=distributed.on_host_rows(value_fn, mesh),
    )
    return parts, critic_params, critic_opt
