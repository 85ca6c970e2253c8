"""The paper-scale block shared by every `:paper` experiment variant and experiments/paper_scale.

A `:paper` variant trains the paper's model, read from a Hugging Face checkpoint
directory the user gives (`--config.model.path`; the path set here is a
placeholder and nothing is downloaded), on a TPU v5p slice, with the batch shape
and optimizer the paper reports. Most seed papers give only an abstract, so
`apply` fills what they leave open with DAPO's recipe (Yu et al. 2025, §4.1, as
its verl scripts run it) and our execution choices; the experiment file then sets
the numbers its paper fixes on top, each commented "paper" or "ours".

The shared block (`apply`):
  model     source "pretrained", path "/path/to/<checkpoint>" (placeholder); f32
            master weights and AdamW moments, bf16 compute, splash attention on TPU
            (blockwise elsewhere), layers scanned, per-block remat, the sampler
            called in row chunks of 32 GiB per chip of bf16 KV cache plus per-row
            working memory (ours).
  task      math_file on a user-given jsonl/parquet (placeholder path), math-verify
            checker, a 17k prompt pool (DAPO-Math-17k's size); `task="code"`: the code
            task on a user-given jsonl of problems with tests (placeholder path; rewards
            from the sandbox), a 24k pool; `task=None` keeps the file's own task
            (synthetic tasks whose features a method needs).
  batch     B = 512 prompts, G = 16, 16 optimizer updates per step, temperature 1,
            top-p 1 (DAPO); N = 8192 new tokens (ours), capped by the checkpoint's
            context minus PROMPT_LEN.
  optimizer AdamW lr 1e-6 constant after 20 rollout steps of warm-up, β2 0.999, weight
            decay 0.01, gradient clip 1 (DAPO's verl recipe).
  loop      500 steps, eval every 20 on 500 test problems x 16 samples, checkpoint
            every 20 (ours).
  suite     with the math_file task, each evaluation also runs the paper benchmarks
            (`eval.suite = "math"`: AIME24/25, AMC23, MATH-500, Minerva, OlympiadBench;
            rlvr_jax.eval) from a user-given data directory (placeholder path), 16
            samples per problem (avg@16, pass@1, pass@16, maj@16) at the rollout's
            temperature and token budget, every 100 steps, at the start and at the end
            (ours; `suite=` picks another suite). With the code task, the code suite
            (LiveCodeBench, HumanEval+, MBPP+) likewise.
  mesh      (1, chips, 1) on fsdp, one micro-batch row per chip; chips by model size
            (`chips_for`, ours).
"""

from __future__ import annotations

import json

import ml_collections

from rlvr_jax.models import presets

PROMPT_LEN = 1024  # P the memory plans assume (scripts/plan.py --prompt-len); ours
DATA_PATH = "/path/to/math_train.jsonl"  # placeholder: override via --config.task.options
CODE_DATA_PATH = "/path/to/code_train.jsonl"  # placeholder: LiveCodeBench/MBPP-style tests
EVAL_DATA_PATH = "/path/to/eval_data"  # placeholder: override via --config.eval.suite_data

# preset -> the Hugging Face checkpoint directory name the placeholder path ends in
# (plan.policy_config maps it back to the preset when the directory is absent).
CHECKPOINTS = {
    "qwen3-0.6b": "Qwen3-0.6B",
    "qwen3-1.7b": "Qwen3-1.7B",
    "qwen3-4b": "Qwen3-4B",
    "qwen3-8b": "Qwen3-8B",
    "qwen2.5-3b": "Qwen2.5-3B",
    "qwen2.5-7b": "Qwen2.5-7B",
    "qwen2.5-32b": "Qwen2.5-32B",
    "qwen2.5-math-1.5b": "Qwen2.5-Math-1.5B",
    "qwen2.5-math-7b": "Qwen2.5-Math-7B",
    "deepseek-r1-distill-qwen-1.5b": "DeepSeek-R1-Distill-Qwen-1.5B",
    "llama-3.1-8b": "Llama-3.1-8B",
}


def chips_for(model: str) -> int:
    """v5p chips of a model's slice (ours): 16 below 2.5B parameters, 32 below 5B, 64
    below 10B, else 128 (one micro-batch row per chip)."""
    n = presets.preset(model).num_params()
    return 16 if n < 2.5e9 else 32 if n < 5e9 else 64 if n < 10e9 else 128


def model_path(model: str) -> str:
    """The placeholder checkpoint path of a preset ("qwen3-8b" -> "/path/to/Qwen3-8B")."""
    if model not in CHECKPOINTS:
        raise ValueError(
            f"no checkpoint name for preset {model!r}; valid: {', '.join(CHECKPOINTS)}"
        )
    return f"/path/to/{CHECKPOINTS[model]}"


def apply(
    c: ml_collections.ConfigDict,
    model: str = "qwen3-8b",
    *,
    task: str | None = "math_file",
    prompts_per_step: int = 512,
    group_size: int = 16,
    max_new_tokens: int = 8192,
    num_minibatches: int = 16,
    lr: float = 1e-6,
    teacher: str = "",
    suite: str | None = None,
) -> ml_collections.ConfigDict:
    """Sets the shared paper-scale block (module docstring) in place.

    Args:
      c: a run config (`rl.config.default_config()` with the method's fields set).
      model: a `models.presets` name with a CHECKPOINTS entry: the policy.
      task: "math_file" (a user-given math data file), "code" (a user-given file of
        programming problems with tests) or None (keep `c.task`).
      prompts_per_step, group_size, max_new_tokens, num_minibatches, lr: B, G, N,
        optimizer updates per step and the peak learning rate (defaults: DAPO's; N
        ours). N is capped at the checkpoint's context minus PROMPT_LEN.
      teacher: a checkpoint directory name ("Qwen3-32B"): every teacher signal still
        on a warm start (score.teacher / teacher_hidden / teacher_topk) reads it from
        "/path/to/<teacher>" instead; "" leaves them (self-teachers use "hint").
      suite: the paper benchmark suite of every evaluation (`rlvr_jax.eval.SUITES`:
        "math", "science", "code"); None: "math" with the math_file task, "code" with
        the code task, else none ("" for none).
    Returns:
      `c`, for chaining.
    """
    chips = chips_for(model)
    context = presets.preset(model).max_position_embeddings
    m = c.model
    m.source, m.path = "pretrained", model_path(model)
    m.param_dtype = "float32"  # an lr of 1e-6 moves a bf16 weight less than its rounding step
    m.dtype = "bfloat16"  # softmax, norms, log-probs and losses stay f32
    m.attention = "pallas"  # splash attention on TPU (blockwise XLA elsewhere and in decode)
    m.scan_layers = True
    m.remat = "block"
    n = min(max_new_tokens, context - PROMPT_LEN)
    # Per chip, one sampler call's rows: their KV cache plus their working memory
    # (prefill activations, decode logits; generate.work_bytes_per_row). One budget for
    # every model and N: the rest of a call (mostly the gathered bf16 weights, 8-48 GiB per
    # chip in the plans) is not per row, and 32 GiB leaves every :paper plan >= 10 %
    # of a v5p chip free (docs/tpu_pods.md).
    c.rollout.cache_gib = 32.0
    c.rollout.cache_dtype = "bfloat16"
    if task == "math_file":
        c.task.name = "math_file"
        c.task.options = json.dumps({"path": DATA_PATH, "checker": "math_verify"})
        c.task.train_size = 17_000  # DAPO-Math-17k's size
    elif task == "code":  # programs with tests, rewarded in the sandbox (tasks/code.py)
        c.task.name = "code"
        c.task.options = json.dumps({"path": CODE_DATA_PATH})
        c.task.train_size = 24_000  # DeepCoder-Preview's ~24k problems (ours)
    elif task is not None:
        raise ValueError(
            f"task = {task!r}; valid: 'math_file', 'code', None (keep config.task)"
        )

    c.data.prompts_per_step = prompts_per_step
    c.data.group_size = group_size
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.max_new_tokens = n

    c.optimizer.lr = lr
    c.optimizer.schedule = "constant"
    c.optimizer.warmup_steps = 20 * num_minibatches  # 20 rollout steps
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.weight_decay = 0.01
    c.optimizer.clip_norm = 1.0

    c.train.steps = 500
    c.train.ppo_epochs = 1
    c.train.num_minibatches = num_minibatches
    c.train.micro_batch_size = chips  # one row per chip
    c.mesh.shape = (1, chips, 1)
    c.mesh.rules = "fsdp"

    c.eval.every = 20
    c.eval.split = "test"
    c.eval.num_problems = 500
    c.eval.n_samples = 16
    c.eval.temperature = 1.0
    if suite is None:
        suite = {"math_file": "math", "code": "code"}.get(task, "")
    c.eval.suite = suite
    if suite:
        c.eval.suite_data = EVAL_DATA_PATH
        c.eval.suite_n_samples = 16
        c.eval.suite_ks = "1,16"
        c.eval.suite_every = 100  # the suite's ~1.5k problems x 16 are hours of decoding
    c.checkpoint.every = 20
    c.checkpoint.keep = 3
    if teacher:
        for name in ("teacher", "teacher_hidden", "teacher_topk"):
            t = c.score[name]
            if t.source == "warm_start":
                t.source, t.path = "pretrained", f"/path/to/{teacher}"
    return c
