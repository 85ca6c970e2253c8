"""OC-GRPO (Off-Context GRPO), update part, on the warm-start Countdown base.

OC-GRPO generates rollouts with privileged guidance (a solution prefix) in the
prompt and trains the unguided policy on them, the PPO surrogate weighted by a
truncated importance weight w = π_old(·|x) / μ(·|x, guide) (loss "oc_grpo",
`core.off_context`); μ is the batch's behaviour_logps_BxT, the log-probs the
rollout stage sampled from.

What this run reproduces: the importance-corrected update only. The rollout
stage has no guided generation yet, so the rollouts here are on-policy,
μ = the sampler's own log-probs, and w = 1 exactly: the run equals GRPO with
the token clip, a check that the off-context path is neutral on-policy.

Paper-fixed (abstract): guided rollouts, ratio to the unguided prompt,
importance-corrected and truncated.
Ours: the decoupled PPO form, token-level weights (level "token"), cap C = 2,
floor 0, ε = 0.2; GRPO advantages, G = 8.

Command: python -m rlvr_jax.main --config=experiments/oc_grpo/oc_grpo.py --workdir=runs/oc_grpo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "oc_grpo"
    c.loss.oc_grpo.cap = 2.0  # C: truncation of w (ours)
    c.loss.oc_grpo.floor = 0.0  # w_min (ours)
    c.loss.oc_grpo.eps_low = 0.2  # ε
    c.loss.oc_grpo.eps_high = 0.2
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
