"""GRPO on Qwen3-8B with a math training file, at the DAPO recipe's scale, on a TPU v5p slice.

Reproduces: the GRPO baseline that the seed papers train on Qwen3-8B (e.g. GAR's
GRPO rows, "competition-level math"), with the batch shape and optimizer of DAPO
(Yu et al. 2025, §4.1 / verl recipe): AdamW at a constant lr 1e-6 after a linear
warm-up of 20 rollout steps, 512 prompts per step, G = 16 responses each, 16
optimizer updates per step (mini-batches of 32 prompts = 512 responses), no KL
term, clip ε = 0.2. The `:dapo` variant switches on DAPO's four changes.
Where neither paper reports a value (response budget for an 8B model, step count,
micro-batch) the comment says "ours".

Data: a .jsonl/.parquet of {"problem", "answer"[, "solution", "id"]} records
(e.g. DAPO-Math-17k or the MATH train split exported to jsonl), copied to every
host; the path below is a placeholder. Model: the Hugging Face Qwen3-8B
directory (config.json + safetensors + tokenizer), also a placeholder.

Command (on every host of the slice, see docs/tpu_pods.md):
  python -m rlvr_jax.main --config=experiments/paper_scale/qwen3_8b_grpo.py \
    --workdir=/gcs/YOUR_BUCKET/runs/qwen3_8b_grpo \
    --config.model.path=/mnt/models/Qwen3-8B \
    --config.task.options='{"path": "/mnt/data/math_train.jsonl"}'
Memory plan before launching (CPU, no weights needed, minutes):
  python scripts/plan.py --config experiments/paper_scale/qwen3_8b_grpo.py --prompt-len 1024
Hardware: TPU v5p-128 (64 chips, 95 GiB HBM each), mesh (data, fsdp, tensor) = (1, 64, 1).
Expected runtime: unmeasured (no TPU run has been made with this codebase).
Expected metric: unmeasured here; GRPO on Qwen3-8B should raise MATH-style test
accuracy (eval avg@n below) over the first few hundred steps.
The workdir is a gcsfuse mount of a bucket every host writes (or a gs:// path).
Multi-host: `rlvr_jax.main --distributed` (docs/tpu_pods.md), the `:dapo` variant's
multi-round dynamic sampling included (the hosts keep their rounds in step).
Fit (scripts/plan.py, `:dapo`, P + N = 1024 + 8192, all 36 layers compiled): train
step 14.4 GiB and sampler call 73.7 GiB per chip of a v5p's 88.5 GiB (docs/tpu_pods.md).
"""

import json

from rlvr_jax.rl.config import default_config

DATA_PATH = "/path/to/math_train.jsonl"  # placeholder: override via --config.task.options
MODEL_PATH = "/path/to/Qwen3-8B"  # placeholder: override via --config.model.path


def get_config(variant: str = ""):
    c = default_config()
    c.model.source = "pretrained"
    c.model.path = MODEL_PATH
    # Precision and memory (ours): bf16 matmuls, f32 master weights and AdamW moments
    # (an lr of 1e-6 moves a bf16 weight by less than its rounding step: updates would be
    # lost); softmax, RMSNorm, log-probs and losses run in f32 whatever the compute dtype.
    c.model.param_dtype = "float32"
    c.model.dtype = "bfloat16"
    c.model.attention = "pallas"  # TPU splash attention (blockwise XLA off TPU and in decode)
    c.model.scan_layers = True  # one compiled block for the 36 layers
    c.model.remat = "block"  # keep only each block's input for the backward pass
    c.rollout.cache_gib = 40.0  # per chip per sampler call, KV cache + work: B x G rows in calls
    c.rollout.cache_dtype = "bfloat16"
    c.task.name = "math_file"
    c.task.options = json.dumps({"path": DATA_PATH, "checker": "math_verify"})
    c.task.train_size = 17_000  # prompt pool cap (DAPO-Math-17k size)

    c.data.prompts_per_step = 512  # B: prompts per rollout step (DAPO)
    c.data.group_size = 16  # G (DAPO)
    c.rollout.temperature = 1.0  # DAPO: training rollouts at T = 1, top-p = 1
    c.rollout.top_p = 1.0
    c.rollout.max_new_tokens = 8192  # L_max; DAPO uses 20480 for a 32B model; ours for 8B

    c.credit.name = "grpo"  # A_i = (r_i - mean) / (std + ε)
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = 0.2  # ε (GRPO / PPO)
    c.loss.ppo_clip.eps_high = 0.2
    c.loss.aggregation = "seq-mean-token-mean"  # GRPO's per-sequence mean
    c.loss.kl_coef = 0.0  # β = 0: DAPO and Dr.GRPO drop the KL term

    c.optimizer.lr = 1e-6  # DAPO
    c.optimizer.schedule = "constant"  # DAPO: constant after warm-up
    c.optimizer.warmup_steps = 20 * 16  # DAPO: 20 rollout steps x 16 updates per step
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999  # verl / torch AdamW default (DAPO's released recipe)
    c.optimizer.weight_decay = 0.01  # verl default (DAPO's released recipe)
    c.optimizer.clip_norm = 1.0  # verl default

    c.train.steps = 500  # ours: rollout steps
    c.train.ppo_epochs = 1
    c.train.num_minibatches = 16  # DAPO: 16 updates per step (512 responses each)
    c.train.micro_batch_size = 64  # ours: 1 row per chip on 64 chips; must divide 512

    c.mesh.shape = (1, 64, 1)  # v5p-128: all 64 chips on fsdp (ZeRO-3), batch rows over fsdp
    c.mesh.rules = "fsdp"

    c.eval.every = 20
    c.eval.split = "test"
    c.eval.num_problems = 500  # ours (MATH-500-sized held-out split)
    c.eval.n_samples = 16  # avg@16 / pass@16 (DAPO reports avg@32 on AIME)
    c.eval.temperature = 1.0
    c.checkpoint.every = 20
    c.checkpoint.keep = 3

    if variant == "dapo":
        c.loss.ppo_clip.eps_high = 0.28  # clip-higher ε_high (DAPO)
        c.loss.aggregation = "token-mean"  # token-level loss (DAPO)
        c.select.name = "dynamic_sampling"  # drop all-equal groups, resample (DAPO)
        c.reward.overlong_cache = 1024  # L_cache (DAPO: 4096 of 20480; ours scaled to 8192)
        c.reward.overlong_penalty = 1.0
    elif variant:
        raise ValueError(f"unknown variant {variant!r}; valid: '' (GRPO), 'dapo'")
    return c
