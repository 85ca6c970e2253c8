"""LSPO (LoRA Scaffolded Policy Optimization) on the warm-start Countdown base.

LSPO recovers the gradient of "cliff" prompts (every rollout of the group
failed): it fits a throw-away LoRA adapter on their reference solutions,
re-rolls them with base + adapter, splices the successes into the batch and
trains the base with a truncated importance correction π_base / π_adapter
(loss "lspo": PPO clip × a length-normalised sequence weight, `core.off_context`).

Paper-fixed (abstract): detect cliff prompts each step, fit a small LoRA
adapter by a brief supervised step on their ground-truth solutions, re-roll
with base + adapter, splice the successful completions with an importance
correction, take the GRPO step on the base alone, discard the adapter.
Ours: the rollout "lora_scaffold" (`rlvr_jax.rollout.scaffold`): rank 8,
α = 16, 8 Adam steps at lr 1e-3 on every projection, G re-rolls per cliff,
at most G/2 successes spliced per group (so it stays mixed); the adapter is
re-initialised every step and never enters the trainer's state; π_base is
recomputed by the trainer (loss.recompute_old_logps). The decoupled PPO form,
a length-normalised sequence weight (level "sequence"), cap C = 2, floor 0,
ε = 0.2; GRPO advantages, G = 8.
Logged per step: cliff groups (rollout/cliff_groups), groups rescued by the
scaffold (rollout/scaffold_groups), the spliced rows' weights
(is_weight@scaffold, is_truncated@scaffold).

Recipe: by default LSPO wraps GRPO's update (compare it with GRPO); `:dapo` (also
`:dapo,arithmetic`, ...) puts it on DAPO's recipe as the paper does (`rl.recipes.dapo`:
clip-higher ε_high = 0.28 on LSPO's clip, token-mean, dynamic sampling by verdict, the
soft overlong penalty; compare it with DAPO). With dynamic sampling, a cliff group the
scaffold rescues is mixed and kept; one it does not is dropped and refilled.
The adapter's re-rolls are counted in the step's rollouts and tokens
(select/off_batch_rollouts, select/off_batch_tokens), so a budget compares like for like.

Command: python -m rlvr_jax.main --config=experiments/lspo/lspo.py --workdir=runs/lspo
Variants: `:grpo` (= ""), `:dapo`, `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Single process only.
Runtime: not measured (grpo.py's plus the adapter fit and re-rolls on steps with cliffs).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): DeepSeek-R1-Distill-Qwen-1.5B on
DeepMath-103K (paper; data path placeholder), 1000 steps, pass@k up to k = 16 (paper);
the shared block (ours; the paper's baseline is DAPO).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every host fits the same adapter on all hosts' cliff prompts
(rlvr_jax/rollout/scaffold.py; docs/tpu_pods.md).
"""

from rlvr_jax.rl import recipes
from rlvr_jax.rl.config import apply_variant, default_config, split_arm

PAPER = dict(
    model="deepseek-r1-distill-qwen-1.5b",  # paper: DeepSeek-R1-Distill-Qwen-1.5B
)


ARMS = ("grpo", "dapo")  # the recipe LSPO wraps: GRPO's update (ours), or DAPO's (the paper's)


def get_config(variant: str = ""):
    recipe, variant = split_arm(variant, ARMS)
    c = default_config()
    c.rollout.name = "lora_scaffold"
    s = c.rollout.lora_scaffold
    s.rank = 8  # LoRA rank (ours)
    s.alpha = 16.0  # LoRA α (ours)
    s.steps = 8  # supervised adapter steps per RL step (ours; the paper's "brief" step)
    s.lr = 1e-3  # their learning rate (ours)
    s.rerolls = 0  # re-rolls per cliff prompt (0 = G)
    s.max_splice = 0  # successes spliced per group (0 = G/2)
    c.loss.recompute_old_logps = True  # π_old = π_base (μ: base + adapter on spliced rows)
    c.credit.name = "grpo"
    c.loss.name = "lspo"
    c.loss.lspo.cap = 2.0  # C (ours)
    c.loss.lspo.floor = 0.0  # w_min (ours)
    c.loss.lspo.length_normalise = True  # exp(mean_t (ℓ^old − ℓ^μ)) (ours)
    c.loss.lspo.eps_low = 0.2  # ε
    c.loss.lspo.eps_high = 0.2
    c.data.group_size = 8  # G
    if recipe == "dapo":  # clip-higher on LSPO's clip, token-mean, dynamic sampling, overlong
        recipes.dapo(c, c.loss.lspo)
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.task.train_size = 103_000  # paper: DeepMath-103K
        c.train.steps = 1000  # paper: the 1000-step reporting horizon
    return c
