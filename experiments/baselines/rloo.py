"""RLOO (Ahmadian et al. 2024, "Back to Basics") on the warm-start bases.

REINFORCE with the leave-one-out baseline A_i = r_i − mean_{j≠i} r_j over the
group of G = 8 samples; one on-policy update per batch (so the PPO ratio is 1
and the surrogate is plain REINFORCE, as in the paper), loss summed per
sequence and averaged over sequences.

Command: python -m rlvr_jax.main --config=experiments/baselines/rloo.py --workdir=runs/rloo
Variants: `:arithmetic`, `:pulse`. Runtime here ~ grpo.py's.

Measured here (seed 0, docs/baselines.md): held-out pass@1 0.255 → 0.308 after
20 steps; 286 s of RL steps on one loaded core.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours), one on-policy
update per batch; lr 1e-6 is the shared block's (ours, untuned for per-sequence sums at
this length).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen3-8b",  # ours
    num_minibatches=1,  # on-policy: one update per batch, as above
)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "rloo"
    c.loss.name = "ppo_clip"
    c.loss.aggregation = "seq-mean-token-sum"  # REINFORCE on log π(y_i) = Σ_t log π(y_t)
    c.train.num_minibatches = 1  # on-policy: one update per batch
    c.optimizer.lr = 3e-5  # per-sequence sums are ~|y| × larger than token means
    return apply_variant(c, variant, paper=PAPER)
