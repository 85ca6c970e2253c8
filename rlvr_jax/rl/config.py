"""The RL experiment config: one locked `ml_collections.ConfigDict` with every field documented.

Experiment files (`experiments/<slug>/<table>.py`) start from `default_config()`
and change fields; the config is locked, so assigning a field that does not exist
raises (with a "did you mean" hint) instead of being ignored. Stage choices are
registry names (`credit.name`, `loss.name`, `select.name`, `rollout.name`); each
registered implementation's hyperparameters live in the sub-config of the same
name (`credit.grpo.eps`). `validate(config)` (`rl.validate`) checks names and
ranges and lists the valid choices in its errors.

Symbols follow the papers: G (group size), β (KL coefficient), ε_low / ε_high
(clip range), γ / λ (GAE).
"""

from __future__ import annotations

import ml_collections

# `methods` registers the seed methods' plug-ins in the stage registries.
from rlvr_jax import optim
from rlvr_jax.rl import credit, methods, objectives, paper_scale, signals  # noqa: F401
from rlvr_jax.rl.credit import transform_names  # noqa: F401  (part of the config's API)
from rlvr_jax.rl.validate import MODEL_DTYPES, MODEL_SOURCES, validate  # noqa: F401  (same)
from rlvr_jax.rollout import ROLLOUTS
from rlvr_jax.scheduling import SCHEDULERS, select


def default_config() -> ml_collections.ConfigDict:
    """The GRPO defaults on the warm-start Countdown base; locked.

    Returns:
      A locked ConfigDict (unlock with `config.unlocked()` to add fields).
    """
    # The registries fill the sub-configs (every registered plug-in's defaults).
    c = ml_collections.ConfigDict()
    c.seed = 0  # model-free randomness: prompt order, sampling, minibatch order

    # --------------------------------------------------------------- policy model
    c.model = ml_collections.ConfigDict()
    c.model.source = "warm_start"  # one of MODEL_SOURCES
    c.model.domain = "countdown"  # warm_start: the warm-start domain (rlvr_jax.train.warmstart)
    c.model.role = "base"  # warm_start: a role of the domain (train.warmstart_specs.ROLES)
    c.model.path = (
        ""  # pretrained: a Hugging Face directory (config.json + safetensors + tokenizer)
    )
    # random: "tiny" (pulse tests) or a preset name (models.presets, e.g. "qwen3-0.6b": that
    # architecture, randomly initialised); init from seed, shipped tokenizer
    c.model.random_size = "tiny"
    c.model.param_dtype = "float32"  # storage dtype of the policy's params: one of MODEL_DTYPES
    c.model.dtype = "float32"  # compute dtype of its activations and matmuls: one of MODEL_DTYPES
    # How the policy is computed (models.ModelConfig; same values either way):
    # "auto" (by key length: xla below 256 key slots, blockwise block 64 above, pallas on
    # TPU; models/attention.py) | "xla" (dense scores) | "blockwise" (O(T·block)) | "pallas"
    c.model.attention = "auto"
    c.model.attention_block = 512  # query/key block of the blockwise kernel
    c.model.scan_layers = False  # full passes as one lax.scan over the layers (fast compiles)
    c.model.remat = "none"  # backward-pass rematerialisation: "none" | "block" | "dots"

    # ----------------------------------------------------------------------- task
    c.task = ml_collections.ConfigDict()
    c.task.name = "countdown"  # rlvr_jax.tasks.get(name, **options)
    # Task options as a JSON object string (options differ per task, so they are
    # not locked fields). Empty: the warm-start domain's options when the model is a
    # warm start of this task, else the task's defaults.
    c.task.options = ""
    c.task.train_size = 50_000  # distinct train-split problems in the prompt pool
    # Split of the prompt pool. "test" = test-time training on the eval prompts, for
    # label-free rewards only (LABEL_FREE): the run reports on what it trains on.
    c.task.train_split = "train"

    # ---------------------------------------------------------------- batch shape
    c.data = ml_collections.ConfigDict()
    c.data.prompts_per_step = 32  # B: prompts (groups) per RL step
    c.data.group_size = 8  # G: rollouts per prompt

    # -------------------------------------------------------------------- select
    c.select = ml_collections.ConfigDict()
    # A scheduler of rlvr_jax.scheduling.SCHEDULERS: "uniform" (the pipeline's next B
    # prompts, G rollouts each), "dynamic_sampling" (DAPO), difficulty, sara, vigor,
    # pair, leeps; its hyperparameters are config.select.<name>.*.
    c.select.name = "uniform"
    # Cap on select↔rollout rounds per step (dynamic_sampling: sampling rounds that
    # refill the batch; uniform takes one round).
    c.select.max_rounds = 3
    # Cap on rollouts started per step, the ledger capacity (0 = the scheduler's
    # default: 2·B·G; dynamic_sampling max_rounds·B·G).
    c.select.max_rollouts = 0
    # Schedulers with a difficulty estimator: "" (the scheduler's default), "beta"
    # (per-prompt Beta posterior) or "graph" (graph_difficulty: kNN graph + Potts prior).
    c.select.estimator = ""
    for name in SCHEDULERS:  # each scheduler's hyperparameters (dataclass defaults)
        c.select[name] = ml_collections.ConfigDict(select.scheduler_defaults(name))
    # estimator "graph" (graph_difficulty): num_states K, neighbours k of the kNN graph,
    # coupling (Potts J), prior_strength (a0 + b0 per state), decay λ of the counts,
    # sweeps (mean-field sweeps per update) over nodes up to `hops` edges from the touched.
    c.select.graph = ml_collections.ConfigDict(select.estimator_defaults("graph"))

    # ------------------------------------------------------------------- rollout
    c.rollout = ml_collections.ConfigDict()
    # A plug-in of rlvr_jax.rollout.ROLLOUTS ("plain": sample the policy on each prompt);
    # its options are config.rollout.<name>.*.
    c.rollout.name = "plain"
    for name in ROLLOUTS.names():
        c.rollout[name] = ml_collections.ConfigDict(dict(ROLLOUTS.get(name).defaults))
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0
    c.rollout.max_new_tokens = 64  # L_max: generation budget per response
    # Memory budget per device of one sampler call's rows, KV cache plus per-row working
    # memory (sampling.generate.work_bytes_per_row); B x G rows are sampled in as many
    # calls as it takes (0: all rows in one call).
    c.rollout.cache_gib = 0.0
    c.rollout.cache_dtype = ""  # KV cache storage: "" (compute dtype) or "bfloat16"
    # Sampling path (sampling.sampler.ENGINES): "static" (one dense-cache program per call)
    # or "paged" (sampling.engine: paged KV cache, continuous batching over decode_slots
    # rows, one prefill per group; one device; its pool is cache_gib of pages).
    c.rollout.engine = "static"
    c.rollout.page_size = 16  # Z, token slots per page (paged)
    c.rollout.decode_slots = 64  # S, rows decoded together (paged)
    c.rollout.prefill_chunk = 64  # C, context tokens per row per prefill call (paged)
    c.rollout.paged_kernel = "jax"  # attention over pages: "jax" (any backend), "pallas" (TPU)
    c.rollout.paged_block_pages = 2  # pages per softmax block of the "jax" kernel (paged)

    # --------------------------------------------------------------------- score
    c.reward = ml_collections.ConfigDict()
    c.reward.overlong_cache = 0  # DAPO soft overlong penalty: L_cache tokens (0 = off)
    c.reward.overlong_penalty = 1.0  # its scale
    c.reward.mask_truncated = False  # DAPO overlong filtering: truncated responses get no loss

    # ------------------------------------------------------------------- signals
    # Score-stage signals (rlvr_jax.rl.signals): extra batch fields that transforms and
    # losses read (teacher log-probs, first-mistake indices, ...), comma-separated, in order.
    c.score = ml_collections.ConfigDict()
    c.score.signals = ""
    for name in signals.SIGNALS.names():
        c.score[name] = ml_collections.ConfigDict(dict(signals.SIGNALS.get(name).defaults))

    # -------------------------------------------------------------------- credit
    c.credit = ml_collections.ConfigDict()
    c.credit.name = "grpo"
    for name in credit.ESTIMATORS.names():
        c.credit[name] = ml_collections.ConfigDict(dict(credit.ESTIMATORS.get(name).defaults))
    # Token-level credit transforms applied after the estimator, comma-separated, in order.
    c.credit.transforms = ""
    for name in credit.TRANSFORMS.names():
        c.credit[name] = ml_collections.ConfigDict(dict(credit.TRANSFORMS.get(name).defaults))

    # -------------------------------------------------------------------- update
    c.loss = ml_collections.ConfigDict()
    c.loss.name = "ppo_clip"  # policy surrogate
    for name in objectives.POLICY_LOSSES.names():
        c.loss[name] = ml_collections.ConfigDict(dict(objectives.POLICY_LOSSES.get(name).defaults))
    c.loss.aggregation = "seq-mean-token-mean"  # one of AGGREGATION_MODES
    # Aggregation "constant" divides by this × the minibatch's rows with a loss token
    # (Dr.GRPO's L_max; 0: rollout.max_new_tokens). Padding rows count in no denominator.
    c.loss.constant = 0.0
    c.loss.kl_coef = 0.0  # β of the KL-to-reference loss term (0 = no reference model)
    c.loss.kl_kind = "k3"  # KL estimator (k1, k2, k3) of the loss term and of the reward penalty
    c.loss.kl_clamp = 10.0  # cap on each token's k3 value (verl's low_var_kl: 10; 0 = none)
    c.loss.kl_reward_coef = 0.0  # β of a KL penalty subtracted from rewards (loss.kl_kind)
    c.loss.entropy_coef = 0.0  # entropy bonus coefficient
    c.loss.tis_cap = 0.0  # truncated importance weight cap C for sampler/trainer mismatch (0 = off)
    c.loss.recompute_old_logps = False  # old log-probs from a trainer forward, not the sampler
    # Behaviour-policy correction (core.rollout_correction): "none", "tis_token",
    # "tis_sequence", "mis_token", "mis_sequence" (IcePop), "decoupled" (AReaL), with
    # cap C > 1. Needs recompute_old_logps (the ratio is π_old / μ).
    c.loss.rollout_correction = "none"
    c.loss.rollout_correction_cap = 2.0

    c.optimizer = ml_collections.ConfigDict()
    # "adamw", "muon" (hidden matrices; AdamW elsewhere) or "iso" (isospectral: fixed
    # singular values, the base optimizer moves the singular frames): rlvr_jax.optim.
    c.optimizer.name = "adamw"
    c.optimizer.muon = ml_collections.ConfigDict(optim.MUON_DEFAULTS)  # β, ns_steps, rms
    c.optimizer.iso = ml_collections.ConfigDict(optim.ISO_DEFAULTS)  # base, retraction, include
    c.optimizer.lr = 1e-4
    c.optimizer.warmup_steps = 0  # in optimizer updates
    c.optimizer.schedule = "constant"  # "constant" or "cosine" (after warm-up)
    c.optimizer.end_lr_fraction = 0.1  # cosine: final lr / peak lr
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.99
    c.optimizer.weight_decay = 0.0
    c.optimizer.clip_norm = 1.0  # global gradient-norm clip (0 = off)

    c.train = ml_collections.ConfigDict()
    c.train.steps = 20  # RL steps (one rollout batch each)
    c.train.ppo_epochs = 1  # passes over each rollout batch
    c.train.num_minibatches = 2  # optimizer updates per pass (the batch split along prompts)
    c.train.micro_batch_size = 0  # rows per gradient-accumulation chunk (0 = whole minibatch)

    # -------------------------------------------------- asynchronous RL (rl.async_loop)
    c.async_rl = ml_collections.ConfigDict()
    # k: step t trains on rollouts sampled by the policy after update t − k (steps < k:
    # the initial policy), produced in a background thread while the learner updates.
    # 0 = the synchronous step, unchanged.
    c.async_rl.max_staleness = 0
    # Rows still decoding when new weights are published (rl.async_partial): "off" (a row
    # is sampled by one version), "continue" (it carries on under the new weights, each
    # token tagged by its version) or "abort" (it restarts under them); decoded in
    # segments of segment_tokens. Partial rollouts are free-running (not repeatable).
    c.async_rl.partial_rollouts = "off"
    # Where the worker samples: -1 = on the learner's devices (colocated: the two share
    # them); i >= 0 = local device i, outside the learner's mesh (disaggregated in one
    # process: weights are pushed to it after each update, the push time logged). On a
    # CPU: XLA_FLAGS=--xla_force_host_platform_device_count=2 gives a second device.
    c.async_rl.rollout_device = -1
    c.async_rl.segment_tokens = 16
    # What the worker is (rl.async_process): "thread" (a thread of the learner's process,
    # sharing its interpreter and XLA thread pool) or "process" (its own OS process,
    # started with "spawn", with its own model copy; each version's weights are sent
    # to it as host arrays). Same schedule, same groups either way.
    c.async_rl.worker = "thread"
    # The process worker's CPUs: "" = the learner's; "1" or "0,2" = only those (set
    # before the child starts, so its XLA thread pool is sized to them).
    c.async_rl.worker_cpus = ""

    # -------------------------------------------------------------- critic (PPO)
    c.critic = ml_collections.ConfigDict()
    c.critic.enabled = False  # train a value model (needed by credit "gae")
    c.critic.lr = 1e-4
    c.critic.value_clip = 0.2  # clipped value loss range
    c.critic.warmup_steps = 0  # RL steps that train only the critic (policy frozen)
    # "mse": scalar head, clipped squared error; "hl_gauss": categorical head over
    # num_bins bins of [v_min, v_max], cross-entropy to HL-Gauss targets (σ = sigma_ratio
    # bin widths), value = expected bin centre (rlvr_jax.core.hl_gauss); the paper's
    # controls "two_hot", "one_hot" and "bernoulli" (2 bins valued v_min, v_max).
    c.critic.loss = "mse"
    c.critic.num_bins = 51  # m
    c.critic.v_min = -1.0  # returns outside [v_min, v_max] are clipped to it
    c.critic.v_max = 1.0
    c.critic.sigma_ratio = 0.75  # σ / bin width

    # ------------------------------------------------------------------ sharding
    c.mesh = ml_collections.ConfigDict()
    # (data, fsdp, tensor) device counts; -1 = the rest (e.g. (1, -1, 1): every device on
    # fsdp). The default runs on the first device; a multi-host run must use every device.
    # Micro-batch rows must be a multiple of data x fsdp.
    c.mesh.shape = (1, 1, 1)
    c.mesh.rules = "fsdp"  # logical-axis rules preset of rlvr_jax.sharding.RULES

    # ---------------------------------------------------------- evaluate / output
    c.eval = ml_collections.ConfigDict()
    c.eval.every = 10  # RL steps between evaluations (0 = only before and after)
    c.eval.split = "test"
    c.eval.num_problems = 128
    c.eval.n_samples = 8  # n: pass@1 and pass@n (unbiased), avg@n
    c.eval.temperature = 1.0
    c.eval.at_start = True  # evaluate the initial policy (the "before" row)
    # Problems of the validation split also evaluated after the last step (logged as
    # val/pass@1, ...; 0 = none): for choosing hyperparameters, never on the test split.
    c.eval.validation_problems = 0
    # A paper benchmark suite (rlvr_jax.eval: "math", "science", "code"; "" = none) also
    # evaluated with every evaluation of the test split, on the benchmark files in
    # suite_data (the user's downloads); logged as suite/<benchmark>/<metric>. Per-problem
    # results are cached in <workdir>/eval_suite/ (a resumed run does not sample again).
    c.eval.suite = ""
    c.eval.suite_data = ""
    c.eval.suite_n_samples = 4  # n per problem: avg@n, pass@k for k in suite_ks, maj@k
    c.eval.suite_ks = "1"  # comma-separated k
    c.eval.suite_num_problems = 0  # the first this many problems per benchmark (0 = all)
    c.eval.suite_max_new_tokens = 0  # 0: rollout.max_new_tokens
    # Steps between suite evaluations (a multiple of eval.every; 0 = at every evaluation);
    # the initial and the final evaluation always include the suite.
    c.eval.suite_every = 0

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every = 10  # RL steps between checkpoints (also saved at the end)
    c.checkpoint.keep = 2  # keep the last K checkpoints
    c.checkpoint.export_final = True  # also write the final policy in HF format to workdir/export

    # Divergence guard (rlvr_jax.run.guard), checked after every optimizer update: a
    # non-finite parameter or gradient norm, or one past these bounds, stops the run
    # before anything is saved (0 = no bound; non-finite values always stop it).
    c.guard = ml_collections.ConfigDict()
    c.guard.max_grad_norm = 1e6  # on the global gradient norm before clipping
    c.guard.max_param_abs = 1e4  # on the largest |parameter| of the policy

    c.log = ml_collections.ConfigDict()
    c.log.tensorboard = True
    # The gradient norms of the outcome advantages' and the credit transforms' dense terms'
    # policy-gradient directions and their ratio, per step (grad_split/*; 2 more backward
    # passes per update): how much of an outcome + dense-term update is the dense term.
    c.log.grad_split = False
    c.log.progress_every_s = 1.0  # non-TTY consoles: at most one progress line per this many s
    # Metric sinks besides metrics.jsonl, comma-separated (rlvr_jax.run.backends):
    # "tensorboard", "wandb" (Weights & Biases: pip install -e '.[wandb]'; imported only
    # when named here).
    c.log.backends = "tensorboard"
    c.log.wandb_project = "rlvr_jax"
    c.log.wandb_mode = "offline"  # "offline" (files in workdir/wandb/; `wandb sync`) | "online"

    c.lock()
    return c


VARIANTS = ("countdown", "arithmetic", "pulse", "paper")


def apply_variant(
    c: ml_collections.ConfigDict,
    variant: str,
    *,
    paper: dict | None = None,
    self_teacher: bool = False,
) -> ml_collections.ConfigDict:
    """Applies a shared `file.py:variant` suffix of the baseline experiments, in place.

    Variants:
      "" / "countdown": the warm-start Countdown base (the default). With
        `self_teacher` (methods that score the policy under a privileged context:
        DASH, CPO, H²SD, RLSD, CSCR) its "privileged" role, the Countdown base
        trained with privileged-context SFT examples (docs/base_models.md).
      "arithmetic": the warm-start multi-step arithmetic base on its task (its
        base has the privileged examples, so `self_teacher` changes nothing).
      "pulse": a tiny random model, 2 steps of a tiny batch: does the pipeline run
        (CI runs every baseline this way; the numbers mean nothing).
      "paper": the paper's model and scale on a TPU v5p slice, from a user-given
        checkpoint path: `rl.paper_scale.apply(c, **paper)`, `paper` holding the
        experiment's paper-fixed model and numbers (default: Qwen3-8B, DAPO's recipe).
    Returns:
      `c`, for chaining.
    """
    if variant in ("", "countdown"):
        if self_teacher:
            c.model.role = "privileged"
        return c
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
    if variant == "paper":
        return paper_scale.apply(c, **(paper or {}))
    if variant == "arithmetic":
        c.model.domain = c.task.name = "arithmetic"
        return c
    c.model.source = "random"
    c.task.name = "arithmetic"
    c.task.train_size = 256
    c.data.prompts_per_step = 4
    c.data.group_size = 4
    c.rollout.max_new_tokens = 16
    c.reward.overlong_cache = min(c.reward.overlong_cache, 4)
    c.loss.constant = 0.0
    c.train.steps = 2
    c.train.num_minibatches = min(c.train.num_minibatches, 2)
    c.train.micro_batch_size = 4
    c.critic.warmup_steps = min(c.critic.warmup_steps, 1)
    c.eval.every = 0
    c.eval.num_problems = 4
    c.eval.n_samples = 2
    c.checkpoint.every = 1
    return c


def split_arm(variant: str, arms) -> tuple[str, str]:
    """Splits an experiment's `file.py:variant` into (arm, base variant).

    An experiment with several arms of one comparison (e.g. CPO's correct-only /
    wrong-only / balanced) names them; its variant is an arm, a base variant of
    `apply_variant`, or both, comma-separated ("wrong_only,pulse").

    Args:
      variant: the variant string.
      arms: the experiment's arm names (the first is the default arm).
    Returns:
      (arm, base variant for `apply_variant`).
    """
    arms = list(arms)
    parts = [p.strip() for p in variant.split(",") if p.strip()]
    chosen = [p for p in parts if p in arms]
    base = [p for p in parts if p not in arms]
    if len(chosen) > 1 or len(base) > 1:
        raise ValueError(
            f"variant {variant!r}: at most one arm ({', '.join(arms)}) and one base "
            f"variant ({', '.join(VARIANTS)})"
        )
    return (chosen or arms[:1])[0], (base or [""])[0]


# The coding papers' variants (gapo, vigor, rstg, saf_opd, iso): `:code` and `:code,pulse`
# train on the synthetic code task (tasks/code_synth.py; the first on its warm-start base),
# `:code,paper` at paper scale on the user's code file with the code suite. Each starts
# from the shared variant it names.
CODE_VARIANTS = {"code": "", "code,pulse": "pulse", "code,paper": "paper"}


def code_variant(variant: str, paper: dict | None = None) -> tuple[str, dict | None]:
    """(the shared `apply_variant` variant, its `paper` block) of an experiment's variant:
    `:code,paper` adds task="code" to the paper block; others pass through."""
    base = CODE_VARIANTS.get(variant, variant)
    return base, dict(paper or {}, task="code") if variant == "code,paper" else paper


def apply_code_task(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """After `apply_variant`: `:code` / `:code,pulse` sample the synthetic code task
    (verified in the sandbox), `:code` on the code_synth warm-start base."""
    if variant in ("code", "code,pulse"):
        c.task.name = "code_synth"
        if variant == "code":
            c.model.domain = "code_synth"
    return c


# The privileged view of the self-teacher: the policy shown the reference solution.
SOLUTION_VIEW = "{prompt}\nReference solution:\n{solution}"


def apply_teacher(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
    """The `teacher` signal of the distillation experiments, after `apply_variant`.

    The warm-start teacher of the policy's domain (same tokenizer, ~2x the
    base's SFT steps), except in "paper" (the pretrained teacher the paper variant
    named, kept) and "pulse": the tiny random policy has no trained
    teacher, so the teacher is the policy itself under SOLUTION_VIEW (source
    "hint"), and a pulse never trains a warm-start model.

    Returns:
      `c`, for chaining.
    """
    t = c.score.teacher
    if variant == "paper":  # the teacher checkpoint `rl.paper_scale.apply(teacher=...)` set
        if t.source != "pretrained":
            raise ValueError(
                "a teacher experiment's :paper variant needs a teacher checkpoint: "
                "apply_variant(c, 'paper', paper=dict(..., teacher='<checkpoint name>'))"
            )
        return c
    t.source, t.domain, t.role = "warm_start", "", "teacher"  # domain "" = model.domain
    if variant == "pulse":
        t.source, t.template = "hint", SOLUTION_VIEW
    return c
