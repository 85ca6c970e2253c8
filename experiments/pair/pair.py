"""PAIR (Pairwise-Aware Inclusion Reweighting) on the warm-start bases.

Paper: "PAIR: Pairwise-Aware Inclusion Reweighting for Adaptive Rollout Allocation
in RLVR" — short prefixes per candidate, a prefix-only predictor of correctness and
remaining tokens, a convex design of continuation probabilities π under an
expected suffix-token budget, and the leave-one-out group gradient's pair terms
weighted by 1/(π_i π_j) (design-unbiased for the complete-pair gradient under an
unclipped, unstandardised objective). Headline: ~51% fewer generated tokens than
full-group GRPO. Compare `select/tokens` with experiments/baselines/rloo.py.

  B = 32 prompts × G = 8 candidates; prefix = L_max / 4 = 16 tokens (ours);
  suffix budget = 0.4 × the predicted remaining tokens of the unfinished
  candidates, π_min = 0.05 (ours); prefix features: mean log-prob and mean
  entropy of the prefix (ours).
  Credit: RLOO replaced by its pair-inclusion-weighted form (transform "pair"),
  unstandardised; loss aggregation "constant" (sequence sums over a fixed
  denominator: the objective the unbiasedness statement is about); PPO clip
  with one epoch (ratios stay near 1).

Command: python -m rlvr_jax.main --config=experiments/pair/pair.py --workdir=runs/pair
Variants: `:arithmetic`, `:pulse` (CI: tiny random model, 2 steps).
Runtime here (2 CPU cores): below rloo.py's (fewer generated tokens, two rounds).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-4B (paper), prefix length N/4
as above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every process runs the scheduler on every host's outcomes (docs/tpu_pods.md).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen3-4b",  # paper: Qwen3-1.7B and Qwen3-4B
)


def get_config(variant: str = ""):
    c = default_config()
    c.select.name = "pair"
    c.select.max_rounds = 2  # prefixes, then continuations
    c.select.pair.suffix_budget = 0.4
    c.select.pair.pi_min = 0.05  # π_min
    c.credit.name = "rloo"
    c.credit.transforms = "pair"  # Â_i with 1/(π_i π_j) pair weights
    c.loss.aggregation = "constant"
    c = apply_variant(c, variant, paper=PAPER)
    c.select.pair.prefix_tokens = c.rollout.max_new_tokens // 4
    return c
