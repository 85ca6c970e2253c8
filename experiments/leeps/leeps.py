"""LEEPS (Latent-guided Explore-Exploit Prompt Sampling) on the warm-start bases.

Paper: "LEEPS: Latent-Guided Explore-Exploit Prompt Sampling for Efficient RLVR" —
an exploit portfolio (prompts recently informative) and an explore portfolio
(representation-space neighbours of them), the step's B prompts split by each
portfolio's recent non-trivial ratio. Headline: +2.6% / +3.7% relative over the
strongest baseline (Qwen2.5-Math 1.5B / 7B). Compare `select/effective_groups`
and pass@1 with experiments/baselines/grpo.py.

  k = 10 neighbours, a 20-step "recent" window, EMA 0.3 of the non-trivial
  ratios, at least 10% per portfolio, Gumbel temperature 0.5 on explore scores
  (ours). Representations: the policy's mean final hidden state per prompt
  (the paper's "policy hidden states"), computed at start and recomputed with
  the current policy every 10 steps (refresh_every, ours; 0 = frozen at step 0);
  each refresh logs "select/leeps_neighbour_overlap", the share of neighbour
  pairs it kept.
  B = 32 prompts × G = 8 rollouts, GRPO, PPO clip (the defaults).

Command: python -m rlvr_jax.main --config=experiments/leeps/leeps.py --workdir=runs/leeps
Variants: `:arithmetic`, `:pulse` (CI: tiny random model, 2 steps).
Runtime here (2 CPU cores): grpo.py's plus an embedding pass and kNN over the
50k-prompt pool at start and every 10 steps (a few minutes each).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-Math-7B (paper), N = 3072
for its 4k context (ours); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every process runs the scheduler on every host's outcomes (docs/tpu_pods.md).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-math-7b",  # paper: Qwen2.5-Math-1.5B and 7B
)


def get_config(variant: str = ""):
    c = default_config()
    c.select.name = "leeps"
    c.select.leeps.neighbours = 10  # k
    c.select.leeps.window = 20
    c.select.leeps.ema = 0.3
    c.select.leeps.min_frac = 0.1
    c.select.leeps.temperature = 0.5
    c.select.leeps.refresh_every = 10  # steps between re-embeddings (ours)
    return apply_variant(c, variant, paper=PAPER)
