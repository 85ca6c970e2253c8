"""GAR (Gradient-Aligned Reward) on the warm-start Countdown base.

Reproduces, in miniature, GAR against GRPO: each rollout's signature is the
gradient of its mean token cross-entropy w.r.t. the final hidden states through
the output projection only, S = normalise(Σ_t g_t ⊙ h_t), g_t = Wᵀ(softmax(W h_t) −
e_{y_t}); the prompt's expert solution is scored the same way under the current
policy; passing rollouts get 1 + β·max(0, cos(S, S_anchor) − mean over the group's
passing rollouts), failing ones 0 (score signal "gar", which replaces the
sequence reward before GRPO). Paper: < 9% wall-clock overhead; compare
step_seconds with grpo.py's.

Paper-fixed (abstract / METHODS.md): output-projection gradients, the expert
anchor, β = 0.5, closed form without backprop through the trunk.
Ours: the ⊙ h_t signature (variant "grad_hidden"; "grad" = Σ_t g_t), shaped rewards
kept on failing rows, vocabulary chunk 1024; GRPO advantages, token PPO clip
ε = 0.2, G = 8. Countdown's expert solution is its reference step trace.

Command: python -m rlvr_jax.main --config=experiments/gar/gar.py --workdir=runs/gar
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's plus two output-projection passes per batch.
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "gar"  # replaces rewards_B
    c.score.gar.variant = "grad_hidden"  # S = normalise(Σ_t g_t ⊙ h_t)
    c.score.gar.beta = 0.5  # β
    c.score.gar.chunk = 1024  # vocabulary chunk of the signature kernel
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
