"""GAR (Gradient-Aligned Reward) on the warm-start Countdown base, as its reference code runs it.

Reproduces, in miniature, GAR against GRPO: each rollout's signature is the
gradient of its mean token cross-entropy w.r.t. the final hidden states through
the output projection only, S = normalise(Σ_t g_t ⊙ h_t), g_t = Wᵀ(softmax(W h_t) −
e_{y_t}); the prompt's expert solution and up to 4 of its other solutions (the
auxiliary anchors) are scored the same way under the current policy; a row's
alignment is a = real + 0.5·max(0, aux − real) (real, aux: its best cosine to
each kind of anchor); passing rollouts get 1 + β·max(0, a − m_g), m_g the mean
of a over the group's passing rollouts when ≥ 2 pass (else 0: a lone passing
rollout is rewarded by its absolute alignment), failing ones 0 (score signal
"gar"). That reward is the advantage as it is: REINFORCE without baseline or
whitening (`credit.reinforce_pp` with baseline "none", whiten False), so failing
rows get no gradient and cosine noise between correct rollouts stays a bonus of
at most β·|Δcos|. The signal's forward pass also gives the old log-probs.
Paper: < 9% wall-clock overhead of a whole step.

Arms (variant names):
  reference (default)  the above
  normalised           the same GAR rewards through GRPO's group normalisation
                       (r − mean)/std: ours before issue 12; within-group cosine
                       differences of ~0.01 become advantages up to ±1.5

Paper-fixed (abstract / reference code github.com/LQgdwind/GAR): output-projection
gradients, the ⊙ h_t signature, the expert anchor, β = 0.5, the group centring
rule above, aux_residual with w = 0.5, reward = advantage, closed form without
backprop through the trunk.
Ours: auxiliary anchors = the task's other verified solutions (the reference
reads them from its data, e.g. teacher rollouts; Countdown's other canonical
solutions in solver order, arithmetic has none); shaped rewards kept on failing
rows; vocabulary chunk 1024; token PPO clip ε = 0.2, G = 8. Countdown's expert
solution is its reference step trace.

Command: python -m rlvr_jax.main --config=experiments/gar/gar.py --workdir=runs/gar
Variants: an arm and/or `arithmetic` / `pulse` (tiny random model, 2 steps),
comma-separated, e.g. `:normalised,arithmetic`.
Runtime (scripts/bench_gar.py step, one loaded core, 2026-12-03): ~10 CPU-s per step
after the first; the GAR signal beyond the forward it shares with the old log-probs
is 16% of a step (11% without auxiliary anchors); docs/benchmarks.md.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (paper: Qwen3-4B and
Qwen3-8B); β = 0.5 and the reference-code choices as above; the expert anchor is each
record's solution field; auxiliary anchors: math_file has none; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config, split_arm

ARMS = ("reference", "normalised")


PAPER = dict(model="qwen3-8b")  # paper: Qwen3-4B and Qwen3-8B


def get_config(variant: str = ""):
    arm, base = split_arm(variant, ARMS)
    c = default_config()
    c.score.signals = "gar"  # replaces rewards_B (and gives old_logps_BxT)
    c.score.gar.variant = "grad_hidden"  # S = normalise(Σ_t g_t ⊙ h_t)
    c.score.gar.beta = 0.5  # β
    c.score.gar.min_group = 2  # centre a group only when ≥ 2 rollouts pass
    c.score.gar.aux_anchors = 4  # auxiliary anchors per prompt (reference: ≤ 4 per type)
    c.score.gar.aux_combine = "aux_residual"  # real + w·max(0, aux − real)
    c.score.gar.aux_weight = 0.5  # w
    c.score.gar.chunk = 1024  # vocabulary chunk of the signature kernel
    # reference: the GAR reward is the advantage (REINFORCE, no baseline, no whitening).
    c.credit.name = "reinforce_pp" if arm == "reference" else "grpo"
    c.credit.reinforce_pp.baseline = "none"
    c.credit.reinforce_pp.whiten = False
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, base, paper=PAPER)
