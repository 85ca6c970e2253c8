"""GAPO (Group Adaptive Clipping Policy Optimization) on GSPO's sequence surrogate.

The GSPO form of experiments/gapo/gapo.py: the clip range of the sequence ratio
s_i = exp(mean_t log ρ_{i,t}) is adapted per rollout,
ε_i = clip(ε·|A_i| / Ā, ε_min, ε_max). Compare with experiments/baselines/gspo.py.

Paper-fixed (abstract): the adaptive per-rollout clip on the GSPO surrogate.
Ours: ε_low / ε_high = GSPO's 3e-4 / 4e-4 at |A_i| = Ā, [ε_min, ε_max] =
[1.5e-4, 1e-3] (half and 2.5× GSPO's high range); Ā over the whole minibatch
(ref_scale = 0; split-invariant); the clip rates by group success rate logged as
in gapo.py (signal "group_success"); the mean over sequences ("seq-mean-token-mean"), GRPO
advantages, G = 8, no KL.

Command: python -m rlvr_jax.main --config=experiments/gapo/gapo_gspo.py --workdir=runs/gapo_gspo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; gspo.py's.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours); the GSPO bounds as
above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "gapo_gspo"
    c.loss.gapo_gspo.eps_low = 3e-4  # ε_low on s_i at |A_i| = Ā
    c.loss.gapo_gspo.eps_high = 4e-4  # ε_high on s_i at |A_i| = Ā
    c.loss.gapo_gspo.eps_min = 1.5e-4  # ε_min (ours)
    c.loss.gapo_gspo.eps_max = 1e-3  # ε_max (ours)
    c.loss.gapo_gspo.ref_scale = 0.0  # Ā: the minibatch's
    c.score.signals = "group_success"  # for the clip rates by group success rate
    c.loss.aggregation = "seq-mean-token-mean"  # (1/G) Σ_i loss_i
    c.data.group_size = 8  # G
    c.train.num_minibatches = 2
    return apply_variant(c, variant, paper=PAPER)
