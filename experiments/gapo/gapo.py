"""GAPO (Group Adaptive Clipping Policy Optimization), token PPO form, on the Countdown base.

Reproduces, in miniature, GAPO against GRPO with a fixed clip: each rollout gets
its own clip range that grows with its advantage, so rollouts carrying a large
learning signal |A_i| get more update headroom. Report the clip fractions
(clip_low_frac / clip_high_frac, the mean bounds eps_low / eps_high) and, with
`core.gapo.clip_rate_by_success`, the clip rate by group success rate.

Paper-fixed (abstract): keep the PPO / GSPO surrogate, adapt only the clip
range per rollout, larger for larger |A_i|.
Ours (docs/methods.md): ε_i = clip(ε·|A_i| / Ā, ε_min, ε_max) on each side, ε = 0.2 (the
PPO value it adapts), [ε_min, ε_max] = [0.1, 0.5]; Ā = mean |A_j| over the
micro-batch's rows with A_j ≠ 0 (loss.gapo.ref_scale = 0; set it > 0, e.g. 1 for
std-normalised GRPO advantages, for bounds independent of the micro-batching).
GRPO advantages, G = 8, two minibatch updates per batch (so clipping is active),
no KL (grpo.py's choices).

Command: python -m rlvr_jax.main --config=experiments/gapo/gapo.py --workdir=runs/gapo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps). The GSPO form
is experiments/gapo/gapo_gspo.py.
Runtime: not measured; grpo.py's (the bounds are elementwise).
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "gapo"
    c.loss.gapo.eps_low = 0.2  # ε_low at |A_i| = Ā
    c.loss.gapo.eps_high = 0.2  # ε_high at |A_i| = Ā
    c.loss.gapo.eps_min = 0.1  # ε_min (ours)
    c.loss.gapo.eps_max = 0.5  # ε_max (ours)
    c.loss.gapo.ref_scale = 0.0  # Ā: 0 = the micro-batch's mean |A_j| over A_j ≠ 0
    c.loss.aggregation = "seq-mean-token-mean"
    c.data.group_size = 8  # G
    c.train.num_minibatches = 2
    return apply_variant(c, variant)
