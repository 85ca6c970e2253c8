"""CBPO (Contrastive Branch Policy Optimization) on the warm-start Countdown base.

CBPO separates two problems: how to spend a fixed rollout budget on branches,
and how to turn branch outcomes into token credit. The rollout samples roots,
screens their tokens by generation entropy, spends the branch budget over
trajectories and positions with path- and node-level decay, and continues each
branch from its parent's exact token prefix; a parent with the branches of a
node is an exact-prefix group whose reward spread, the Contrastive Branch
Value (CBV), rescales the advantages of the continuation without changing
their sign. Several nodes on one path cut it into non-overlapping credit
segments, and tokens the branches share with their parent are trained once.

Paper-fixed (abstract): entropy screening of branch positions over the whole
response; path-level and node-level budget decay; exact-prefix groups; CBV from
their reward variation; sign-preserving rescaling of continuation advantages;
non-overlapping segments when several nodes sit on one path; outcome rewards only.
Ours: the rollout "branching" (`rlvr_jax.rollout.branching`): of G = 8 rows per
prompt, roots = ¼ (2 roots), the top entropy_frac = 0.2 of the roots' tokens
are candidates, width = 2 branches per node (3 nodes), greedy allocation with
path decay α = ½ per node on a root and node decay β = ½ (score × (1 − β^d) at
distance d from a chosen node), one level of branching, continuations cut so no
path exceeds L_max. Credit (score signal "branch_tree", transform "cbpo",
`rlvr_jax.core.cbpo`): GRPO advantages over the whole group (roots and
branches); CBV = population std of the node group's rewards; factor =
clip(CBV / mean CBV, s_min = 0.1, s_max = 3); a token shared by several rows
(the parent's prefix before a branch point) is held by the parent and credited
once with the mean advantage of the rows through it (GRPO's net credit there).
Token PPO clip ε = 0.2. Not here: the paper's multi-turn tool-integrated
branching (the rollout refuses multi-turn tasks; branches inside a model turn
are not built) and its search benchmarks.
Logged per step: rollout/branches_per_root, rollout/node_cbv (mean CBV of the
nodes' groups), rollout/node_contrast (share of nodes whose group disagrees),
rollout/branched (share of branch rows) with the reward / pass rate of branch rows
against roots (rollout/branched_reward, rollout/not_branched_*).

Command: python -m rlvr_jax.main --config=experiments/cbpo/cbpo.py --workdir=runs/cbpo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps, G = 8 kept).
Runtime: two sampler calls per step (roots, then branches; a branch decodes the full
budget before its cut), ~1.5x GRPO's CPU time in the run below.

Measured (one seed, a miniature, not a reproduction): CBPO vs GRPO
(experiments/baselines/grpo.py) at an equal rollout budget, 32 prompts x G = 8 rows per
step, 10 steps, on the warm-start Countdown base, held-out pass@k on 128 test problems x
4 samples at temperature 1, each arm run as
  taskset -c 0 nice -n 10 python -m rlvr_jax.main --config=<file> --workdir=runs/mini_<arm>
    --config.train.steps=10 --config.eval.every=0 --config.eval.n_samples=4
    --config.seed=0 --config.checkpoint.export_final=False
on this 2-core CPU shared with other jobs:
  arm   pass@1 before -> after   pass@4 before -> after   CPU (user+sys)
  CBPO  0.213 -> 0.307           0.461 -> 0.516           189 s (wall 15m29s)
  GRPO  0.213 -> 0.313           0.461 -> 0.492           127 s (wall 8m49s)
CBPO logged 3.0 branches per root and a mean node CBV of 0.08-0.16 per step; branch rows'
reward was below the roots' on 8 of 10 steps. One seed and 512 samples per evaluation
(standard error of pass@1 ~0.02): no difference between the arms is resolved.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract: two
unnamed scales) on math_file (single-turn: multi-turn branching is not built), G = 16
with the root share above (4 roots); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.rollout.name = "branching"
    c.rollout.branching.roots = 0.25  # share of G sampled as roots (ours)
    c.rollout.branching.entropy_frac = 0.2  # top share of candidate positions by H_t (ours)
    c.rollout.branching.width = 2  # branches per node (ours)
    c.rollout.branching.path_decay = 0.5  # α: per node already on a root (ours)
    c.rollout.branching.node_decay = 0.5  # β: 1 − β^d near a chosen node (ours)
    c.rollout.branching.max_branches = 0  # cap on branch rows per group (0: G − roots)
    c.score.signals = "branch_tree"  # the tree's credit layout (branch_*)
    c.credit.name = "grpo"
    c.credit.transforms = "cbpo"
    c.credit.cbpo.s_min = 0.1  # lower clip of the CBV factor (> 0: sign kept; ours)
    c.credit.cbpo.s_max = 3.0  # upper clip (ours)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G: rollouts per prompt, roots and branches together
    c = apply_variant(c, variant, paper=PAPER)
    if "pulse" in variant.split(","):
        c.data.group_size = 8  # the pulse keeps G = 8: 2 roots, 3 nodes of 2 branches each
    return c
