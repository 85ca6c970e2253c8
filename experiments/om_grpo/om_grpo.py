"""OM-GRPO (Outcome-Masked GRPO, "Don't Peek at the Answer") on the warm-start Countdown base.

Reproduces, in miniature, label-free RL against majority-vote RL (TTRL-style) and
verifier GRPO: the reward of a rollout is the share of its group giving the same
(canonicalised) answer, and the answer span gets no gradient, so the policy
cannot raise its reward by reinforcing the answer tokens themselves. The verifier
only reports pass rates. The contrast-augmented reward is
experiments/om_grpo/om_grpo_contrast.py.

Paper-fixed (abstract): soft consensus reward, no gradient on the answer span,
contrast augmentation from pairwise comparisons of existing rollouts.
Ours: consensus n_{a_i}/n_g with self included (leave_one_out = False), GRPO
normalisation of those rewards (std, ε = 1e-6); Countdown answers compared by
`countdown.canonical`; token PPO clip ε = 0.2, G = 8.
Not here: the test-time-training mode (train on the eval prompts).

Command: python -m rlvr_jax.main --config=experiments/om_grpo/om_grpo.py --workdir=runs/om_grpo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "answers"  # answer_id_B, answer_start_B, answer_end_B
    c.credit.name = "grpo"  # the verifier's advantage, replaced by the transform
    c.credit.transforms = "om_grpo"
    c.credit.om_grpo.leave_one_out = False  # n_{a_i}/n_g, self included (ours)
    c.credit.om_grpo.scale_by_std = True
    c.credit.om_grpo.eps = 1e-6
    c.credit.om_grpo.mask_answer = True  # no gradient on the answer span
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
