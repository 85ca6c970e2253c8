"""Graph-structured online difficulty estimation plugged into SARA (in place of the per-prompt
Beta posterior), on the warm-start bases.

Paper: "Efficient RLVR Scheduling via Graph-Structured Online Difficulty Estimation" —
kNN graph over prompts, K latent difficulty states with a Potts prior, state-level
Beta-Binomial, online mean-field updates; plugged into selection / allocation
schedulers. Compare with experiments/sara/sara.py (per-prompt Beta): same run,
one field different (`select.estimator`).

  graph: K = 4 states, k = 10 neighbours, Potts J = 1, decay 0.9 (ours, the
  estimator's defaults); prompt embeddings: the initial policy's mean final
  hidden state per prompt, computed once at start (ours; the paper uses text
  embeddings + reasoning similarity).
  SARA fields as in experiments/sara/sara.py.

Command: python -m rlvr_jax.main --config=experiments/graph_difficulty/sara_graph.py \
    --workdir=runs/graph_difficulty
Variants: `:arithmetic`, `:pulse` (CI: tiny random model, 2 steps).
Runtime here (2 CPU cores): sara.py's plus the one-off embedding pass over the
50k-prompt pool (a few minutes) and the kNN graph.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract:
several unnamed base models); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Multi-host: every process runs the scheduler on every host's outcomes (docs/tpu_pods.md).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.select.name = "sara"
    c.select.estimator = "graph"  # graph_difficulty in place of the per-prompt Beta
    c.select.max_rounds = 8
    c.select.sara.probe = 2
    c.select.sara.probe_step = 2
    c.select.sara.tau_commit = 0.45
    c.select.sara.tau_abandon = 0.3
    return apply_variant(c, variant, paper=PAPER)
