"""LSPO (LoRA Scaffolded Policy Optimization), update part, on the warm-start Countdown base.

LSPO detects all-fail prompts, fits a throw-away LoRA adapter on their reference
solutions, re-rolls them with base + adapter, splices the successes into the
batch and trains the base with a truncated importance correction
π_base / π_adapter (loss "lspo": PPO clip × a length-normalised sequence weight,
`core.off_context`); μ is the batch's behaviour_logps_BxT, the log-probs the
rollout stage sampled from.

What this run reproduces: the importance-corrected update only. The rollout
stage has no adapter re-rolls yet, so every row is on-policy, μ = the
sampler's log-probs, and the weight is 1 exactly: the run equals GRPO with the
token clip. When the re-roll stage records the adapter's sampling log-probs
as the rows' rollout log-probs, this config trains LSPO unchanged.

Paper-fixed (abstract): importance correction π_base/π_adapter, truncated; the
GRPO step on the base only.
Ours: the decoupled PPO form, a length-normalised sequence weight (level
"sequence"), cap C = 2, floor 0, ε = 0.2; GRPO advantages, G = 8.

Command: python -m rlvr_jax.main --config=experiments/lspo/lspo.py --workdir=runs/lspo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "lspo"
    c.loss.lspo.cap = 2.0  # C (ours)
    c.loss.lspo.floor = 0.0  # w_min (ours)
    c.loss.lspo.length_normalise = True  # exp(mean_t (ℓ^old − ℓ^μ)) (ours)
    c.loss.lspo.eps_low = 0.2  # ε
    c.loss.lspo.eps_high = 0.2
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
