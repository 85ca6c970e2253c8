"""`validate(config)`: the RL config's checks, generic over the plug-ins it chooses.

The checks here are the ones no plug-in owns (model, mesh, batch split,
ranges of the shared fields). Each chosen plug-in's own fields and cross-field
constraints are its registry entry's `check(config)` (and the scheduler
class's `check_config`); its declared facts (label-free, off-policy,
group-relative, the batch fields it requires and provides) drive the checks
between stages. Every error names the field, its value and the valid choices.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import ml_collections

from rlvr_jax import optim, sharding, tasks
from rlvr_jax.core.losses import AGGREGATION_MODES, KL_KINDS
from rlvr_jax.core.rollout_correction import CORRECTIONS
from rlvr_jax.eval.prompts import SUITES
from rlvr_jax.models.config import ATTENTION_IMPLS, REMAT_POLICIES
from rlvr_jax.registry import Registry, one_of
from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.rl import critic as critic_lib
from rlvr_jax.rl.async_partial import PARTIAL_MODES
from rlvr_jax.rl.credit import transform_names
from rlvr_jax.rollout import ROLLOUTS
from rlvr_jax.sampling.sampler import ENGINES
from rlvr_jax.scheduling import SCHEDULERS, select

MODEL_SOURCES = ("warm_start", "pretrained", "random")
MODEL_DTYPES = ("float32", "bfloat16")


def plugins(c: ml_collections.ConfigDict) -> list[tuple[str, Registry, str, Any]]:
    """Every plug-in the config chooses, in stage order.

    Returns:
      (config field that names it, its registry, its name, its options sub-config
      or None when the name is not registered).
    """
    chosen = [
        ("rollout.name", ROLLOUTS, c.rollout.name, c.rollout),
        ("credit.name", credit.ESTIMATORS, c.credit.name, c.credit),
        *(("credit.transforms", credit.TRANSFORMS, n, c.credit) for n in transform_names(c)),
        ("loss.name", objectives.POLICY_LOSSES, c.loss.name, c.loss),
        *(("score.signals", signals.SIGNALS, n, c.score) for n in signals.signal_names(c)),
    ]
    return [(f, reg, n, section.get(n) if n in reg else None) for f, reg, n, section in chosen]


def validate(c: ml_collections.ConfigDict) -> None:
    """Checks choices and ranges; ValueError naming the field and the valid values.

    The generic checks are here; each chosen plug-in's own fields and cross-field
    constraints are its registry entry's `check(config)` (and the scheduler's
    `check_config`), and its declared facts (label-free, off-policy, group-relative,
    the fields it requires and provides) drive the checks between stages.
    """
    _check_finite(c.to_dict())
    _check_model(c)
    one_of("task.name", c.task.name, tasks.names())
    one_of("task.train_split", c.task.train_split, tasks.base.SPLITS)
    one_of("select.name", c.select.name, list(SCHEDULERS))
    if c.task.train_split != "train":
        _check_label_free(c)
    one_of("select.estimator", c.select.estimator, select.ESTIMATOR_NAMES)
    for field, registry, name, options in plugins(c):
        one_of(field, name, registry.names())
        entry = registry.get(name)
        if entry.check is not None:
            entry.check(c)
        if entry.fact("off_policy", options) and not c.loss.recompute_old_logps:
            raise ValueError(
                f"config.{field} = {name!r} samples from another context or weights than "
                "pi_old: set config.loss.recompute_old_logps = True"
            )
    one_of("loss.aggregation", c.loss.aggregation, AGGREGATION_MODES)
    one_of("loss.kl_kind", c.loss.kl_kind, KL_KINDS)
    one_of("optimizer.schedule", c.optimizer.schedule, ("constant", "cosine"))
    _check_ranges(c)
    one_of("optimizer.name", c.optimizer.name, optim.OPTIMIZERS)
    one_of("optimizer.iso.base", c.optimizer.iso.base, optim.ISO_BASES)
    one_of("optimizer.iso.retraction", c.optimizer.iso.retraction, optim.RETRACTIONS)
    _check_mesh_and_batch(c)
    if c.loss.tis_cap and not c.loss.recompute_old_logps:
        raise ValueError(
            "config.loss.tis_cap needs config.loss.recompute_old_logps = True (TIS compares "
            "the trainer's log-probs with the sampler's)"
        )
    _check_async(c)
    _check_suite(c)
    scheduler = select.build_scheduler(c)  # its own checks, naming config.select.<name>
    if c.async_rl.max_staleness and scheduler.embedding_refresh_every():
        raise ValueError(
            f"config.select.name = {c.select.name!r} re-embeds its pool with the current "
            f"policy every {scheduler.embedding_refresh_every()} steps, which the "
            f"asynchronous rollout worker cannot read (config.async_rl.max_staleness = "
            f"{c.async_rl.max_staleness}); set its refresh to 0 or run synchronously"
        )
    if c.select.max_rollouts and c.select.max_rollouts < c.data.group_size:
        raise ValueError(
            f"config.select.max_rollouts = {c.select.max_rollouts} is below "
            f"config.data.group_size = {c.data.group_size}"
        )
    SCHEDULERS[c.select.name].check_config(c)
    _check_fields(c)
    critic_lib.check_config(c)


# What an asynchronous run (async_rl.max_staleness > 0) may choose: a rollout
# plug-in registered `asynchronous=True` (the others sample with the trainer's
# state or keep state across steps: an adapter, a self-play opponent, a reflection
# pass, branches of a tree; not yet made version-aware). Every scheduler runs in
# the rollout worker and sees the outcomes of its own rows (sampled by the policy
# k steps behind the learner), except one that re-embeds its pool with the
# current policy during the run (LEEPS's refresh_every > 0): that reads the
# learner's model.


def _check_async(c: ml_collections.ConfigDict) -> None:
    """The behaviour-policy correction and the asynchronous schedule's fields."""
    one_of("loss.rollout_correction", c.loss.rollout_correction,
           ("none", *CORRECTIONS.names()))  # fmt: skip
    if c.loss.rollout_correction != "none":
        if not c.loss.rollout_correction_cap > 1:
            raise ValueError(
                f"config.loss.rollout_correction_cap = {c.loss.rollout_correction_cap!r}; "
                "must be > 1 (the weights are truncated or masked at C and 1/C)"
            )
        if not c.loss.recompute_old_logps:
            raise ValueError(
                f"config.loss.rollout_correction = {c.loss.rollout_correction!r} needs "
                "config.loss.recompute_old_logps = True (the ratio is the learner's "
                "pi_old over the rollout's mu; without it pi_old = mu and every weight is 1)"
            )
        if c.loss.tis_cap:
            raise ValueError(
                "config.loss.tis_cap and config.loss.rollout_correction both weight the "
                "policy loss: use rollout_correction = 'tis_token' with "
                "rollout_correction_cap instead of tis_cap"
            )
    k = c.async_rl.max_staleness
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"config.async_rl.max_staleness = {k!r}; must be an integer >= 0")
    one_of("async_rl.partial_rollouts", c.async_rl.partial_rollouts, PARTIAL_MODES)
    if c.async_rl.rollout_device < -1:
        raise ValueError(
            f"config.async_rl.rollout_device = {c.async_rl.rollout_device!r}; must be -1 "
            "(the learner's devices) or a local device index"
        )
    if c.async_rl.segment_tokens < 1:
        raise ValueError(
            f"config.async_rl.segment_tokens = {c.async_rl.segment_tokens!r}; must be >= 1"
        )
    _check_worker(c)
    if k == 0:
        if c.async_rl.partial_rollouts != "off":
            raise ValueError(
                f"config.async_rl.partial_rollouts = {c.async_rl.partial_rollouts!r} needs "
                "config.async_rl.max_staleness >= 1 (a synchronous step has no weight "
                "update during its rollouts)"
            )
        return
    if not ROLLOUTS.get(c.rollout.name).asynchronous:
        allowed = [e.name for e in ROLLOUTS.entries() if e.asynchronous]
        raise ValueError(
            f"config.rollout.name = {c.rollout.name!r} cannot run asynchronously "
            f"(config.async_rl.max_staleness = {k}); asynchronous rollouts: {allowed}"
        )


ASYNC_WORKERS = ("thread", "process")  # rl.async_loop.RolloutWorker, rl.async_process


def _check_worker(c: ml_collections.ConfigDict) -> None:
    """async_rl.worker and worker_cpus, and what the process worker does not support."""
    a = c.async_rl
    one_of("async_rl.worker", a.worker, ASYNC_WORKERS)
    if a.worker_cpus:
        cpus = [x.strip() for x in a.worker_cpus.split(",")]
        if not all(x.isdigit() for x in cpus) or len({int(x) for x in cpus}) != len(cpus):
            raise ValueError(
                f"config.async_rl.worker_cpus = {a.worker_cpus!r}; must be '' (the "
                "learner's CPUs) or distinct CPU numbers separated by commas, e.g. '1' or '0,2'"
            )
        if a.worker != "process":
            raise ValueError(
                f"config.async_rl.worker_cpus = {a.worker_cpus!r} needs "
                f"config.async_rl.worker = 'process' (it is {a.worker!r})"
            )
    if a.worker != "process":
        return
    if not a.max_staleness:
        raise ValueError(
            "config.async_rl.worker = 'process' needs config.async_rl.max_staleness >= 1 "
            "(a synchronous step has no rollout worker)"
        )
    if a.partial_rollouts != "off":
        raise ValueError(
            f"config.async_rl.partial_rollouts = {a.partial_rollouts!r} is not supported "
            "with config.async_rl.worker = 'process' (its segments would need the newest "
            "version mid-rollout); use worker = 'thread' or partial_rollouts = 'off'"
        )
    if a.rollout_device >= 0:
        raise ValueError(
            f"config.async_rl.rollout_device = {a.rollout_device} is for the thread worker; "
            "with config.async_rl.worker = 'process' the worker has its own devices: "
            "set rollout_device = -1 and place it with config.async_rl.worker_cpus"
        )


def _check_suite(c: ml_collections.ConfigDict) -> None:
    """eval.suite's fields (the suite is loaded, and its files checked, when it runs)."""
    if not c.eval.suite:
        return
    one_of("eval.suite", c.eval.suite, sorted(SUITES))
    if not c.eval.suite_data:
        raise ValueError(
            f"config.eval.suite = {c.eval.suite!r} needs config.eval.suite_data: the "
            "directory of the benchmark files you downloaded (docs/eval_suites.md)"
        )
    try:
        ks = [int(k) for k in c.eval.suite_ks.split(",")]
    except ValueError:
        ks = []
    if not ks or not all(1 <= k <= c.eval.suite_n_samples for k in ks):
        raise ValueError(
            f"config.eval.suite_ks = {c.eval.suite_ks!r}; must be comma-separated integers "
            f"in [1, config.eval.suite_n_samples = {c.eval.suite_n_samples}]"
        )
    every = c.eval.suite_every
    if every < 0 or (every and (not c.eval.every or every % c.eval.every)):
        raise ValueError(
            f"config.eval.suite_every = {every} must be 0 or a multiple of "
            f"config.eval.every = {c.eval.every} (the suite runs inside an evaluation)"
        )


def _check_model(c: ml_collections.ConfigDict) -> None:
    """The policy model's and the sampler cache's fields."""
    one_of("model.source", c.model.source, MODEL_SOURCES)
    one_of("model.param_dtype", c.model.param_dtype, MODEL_DTYPES)
    one_of("model.dtype", c.model.dtype, MODEL_DTYPES)
    one_of("model.attention", c.model.attention, ATTENTION_IMPLS)
    one_of("model.remat", c.model.remat, REMAT_POLICIES)
    _at_least(c, "model.attention_block", 1)
    one_of("rollout.cache_dtype", c.rollout.cache_dtype, ("", "float32", "bfloat16"))
    if c.rollout.cache_gib < 0:
        raise ValueError(f"config.rollout.cache_gib = {c.rollout.cache_gib!r}; must be >= 0")
    one_of("rollout.engine", c.rollout.engine, ENGINES)
    one_of("rollout.paged_kernel", c.rollout.paged_kernel, ("jax", "pallas"))
    for field in ("page_size", "decode_slots", "prefill_chunk", "paged_block_pages"):
        _at_least(c, f"rollout.{field}", 1)
    if c.model.source == "pretrained" and not c.model.path:
        raise ValueError("config.model.path is required when config.model.source = 'pretrained'")


def _check_label_free(c: ml_collections.ConfigDict) -> None:
    """Training on held-out prompts: only with a label-free reward and the uniform scheduler."""
    chosen = [(f, reg.get(n)) for f, reg, n, _ in plugins(c) if n in reg]
    if not any(entry.label_free for _, entry in chosen):
        label_free = {
            field: [e.name for e in reg.entries() if e.label_free]
            for field, reg in (("score.signals", signals.SIGNALS),
                               ("credit.transforms", credit.TRANSFORMS))
        }  # fmt: skip
        raise ValueError(
            f"config.task.train_split = {c.task.train_split!r} trains on held-out prompts; "
            "only a label-free reward may (score.signals with one of "
            f"{tuple(label_free['score.signals'])} or credit.transforms with one of "
            f"{tuple(label_free['credit.transforms'])})"
        )
    if not SCHEDULERS[c.select.name].label_free:
        valid = " or ".join(repr(n) for n, s in SCHEDULERS.items() if s.label_free)
        raise ValueError(
            f"config.task.train_split = {c.task.train_split!r} needs select.name = "
            f"{valid} (got {c.select.name!r}: dynamic sampling filters groups by the "
            "verifier's rewards, and the stateful schedulers draw train-split prompts)"
        )


def _check_mesh_and_batch(c: ml_collections.ConfigDict) -> None:
    """The mesh shape, and the batch's split into minibatches, micro-batches and shards."""
    one_of("mesh.rules", c.mesh.rules, sorted(sharding.RULES))
    shape = tuple(c.mesh.shape)
    bad_sizes = shape.count(-1) > 1 or any(s < -1 or s == 0 for s in shape)
    if len(shape) != len(sharding.AXES) or bad_sizes:
        raise ValueError(
            f"config.mesh.shape = {c.mesh.shape!r}; needs one size per axis of {sharding.AXES} "
            "(positive, at most one -1)"
        )
    rest = jax.device_count() // math.prod(s for s in shape if s != -1)  # -1: this machine's
    shards = math.prod(rest if s == -1 else s for s in shape[:2])  # data x fsdp
    micro = c.train.micro_batch_size or (
        c.data.prompts_per_step * c.data.group_size // max(c.train.num_minibatches, 1)
    )
    if micro % shards:
        raise ValueError(
            f"config.train.micro_batch_size = {c.train.micro_batch_size} ({micro} rows per "
            f"micro-batch) must be a multiple of the mesh's {shards} batch shards (data x fsdp "
            f"of config.mesh.shape = {shape})"
        )
    for field in (
        "data.prompts_per_step",
        "data.group_size",
        "train.steps",
        "train.ppo_epochs",
        "train.num_minibatches",
        "select.max_rounds",
        "rollout.max_new_tokens",
    ):
        _at_least(c, field, 1)  # fmt: skip
    if c.data.prompts_per_step % c.train.num_minibatches:
        raise ValueError(
            f"config.train.num_minibatches = {c.train.num_minibatches} must divide "
            f"config.data.prompts_per_step = {c.data.prompts_per_step}"
        )
    rows = c.data.prompts_per_step * c.data.group_size // c.train.num_minibatches
    if c.train.micro_batch_size and rows % c.train.micro_batch_size:
        raise ValueError(
            f"config.train.micro_batch_size = {c.train.micro_batch_size} must divide the "
            f"minibatch of {rows} rows"
        )
    if c.reward.overlong_cache > c.rollout.max_new_tokens:
        raise ValueError(
            f"config.reward.overlong_cache = {c.reward.overlong_cache} exceeds "
            f"config.rollout.max_new_tokens = {c.rollout.max_new_tokens}"
        )


def _check_fields(c: ml_collections.ConfigDict) -> None:
    """Every batch field a chosen transform or loss requires has a provider in the config.

    Providers: the declared batch fields, the chosen scheduler's `batch_fields`, the
    chosen rollout's `provides`, and the score signals listed (`signals.check_fields`).
    A field only another scheduler adds names that scheduler.
    """
    needed = {
        f"{'credit transform' if field == 'credit.transforms' else 'loss'} {name!r}": (
            reg.get(name).requires
        )
        for field, reg, name, _ in plugins(c)
        if field in ("credit.transforms", "loss.name")
    }
    own = (*SCHEDULERS[c.select.name].batch_fields, *ROLLOUTS.get(c.rollout.name).provides)
    for consumer, fields in needed.items():
        for name, sched in SCHEDULERS.items():
            missing = [f for f in fields if f in sched.batch_fields and f not in own]
            if missing:
                raise ValueError(
                    f"config: {consumer} needs {missing}, which the {name!r} scheduler adds; "
                    f"it needs config.select.name = {name!r}, got {c.select.name!r}"
                )
    signals.check_fields(c, needed, available=own)


def _at_least(c: ml_collections.ConfigDict, field: str, minimum) -> None:
    """ValueError "config.<field> = v; must be >= minimum" if the value is below it."""
    section, key = field.split(".")
    if c[section][key] < minimum:
        raise ValueError(f"config.{field} = {c[section][key]!r}; must be >= {minimum}")


def _check_finite(tree, prefix: str = "") -> None:
    """ValueError naming the first float field that is NaN or infinite."""
    for key, value in tree.items():
        if isinstance(value, dict):
            _check_finite(value, f"{prefix}{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"config.{prefix}{key} = {value!r}; must be a finite number")


def _check_ranges(c: ml_collections.ConfigDict) -> None:
    """Range checks of numeric fields; ValueError naming the field and its allowed range."""

    def bad(field, allowed):
        value = c
        for part in field.split("."):
            value = value[part]
        raise ValueError(f"config.{field} = {value!r}; must be {allowed}")

    at_least = {
        1: ("checkpoint.every", "checkpoint.keep", "eval.n_samples", "eval.num_problems",
            "task.train_size"),
        0: ("train.micro_batch_size", "eval.every", "optimizer.warmup_steps", "rollout.top_k",
            "eval.validation_problems",
            "eval.temperature", "rollout.temperature", "optimizer.weight_decay",
            "optimizer.clip_norm", "loss.kl_coef", "loss.kl_reward_coef", "loss.tis_cap",
            "loss.constant", "loss.kl_clamp", "log.progress_every_s", "guard.max_grad_norm",
            "guard.max_param_abs"),
    }  # fmt: skip
    for minimum, fields in at_least.items():
        for field in fields:
            section, key = field.split(".")
            if c[section][key] < minimum:
                bad(field, f">= {minimum}")
    for field in ("optimizer.lr",) + (("critic.lr",) if c.critic.enabled else ()):
        section, key = field.split(".")
        if not c[section][key] > 0:
            bad(field, "> 0")
    for field in ("optimizer.b1", "optimizer.b2"):
        if not 0 <= c.optimizer[field.split(".")[1]] < 1:
            bad(field, "in [0, 1)")
    if not 0 <= c.optimizer.end_lr_fraction <= 1:
        bad("optimizer.end_lr_fraction", "in [0, 1]")
    if not 0 < c.rollout.top_p <= 1:
        bad("rollout.top_p", "in (0, 1]")
    loss = c.loss[c.loss.name]
    if "eps_low" in loss and not 0 <= loss.eps_low < 1:
        bad(f"loss.{c.loss.name}.eps_low", "in [0, 1) (the ratio is clipped at 1 - eps_low)")
    if "eps_high" in loss and not loss.eps_high >= 0:
        bad(f"loss.{c.loss.name}.eps_high", ">= 0")
    if "dual_clip" in loss and loss.dual_clip and not loss.dual_clip > 1:
        bad(f"loss.{c.loss.name}.dual_clip", "0 (off) or > 1")
    estimator = credit.ESTIMATORS.get(c.credit.name)
    if estimator.fact("group_relative", c.credit[c.credit.name]) and c.data.group_size < 2:
        bad(
            "data.group_size",
            f">= 2 for the group-relative estimator config.credit.name = {c.credit.name!r} "
            "(one rollout per group gives every row a zero advantage)",
        )
