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
non-overlapping segments when several nodes sit on one path; outcome rewards only;
multi-turn interaction with tools (its setting) and math reasoning.
Ours: the rollout "branching" (`rlvr_jax.rollout.branching`): of G = 8 rows per
prompt, roots = ¼ (2 roots), the top entropy_frac = 0.2 of the roots' sampled
tokens are candidates, width = 2 branches per node (3 nodes), greedy allocation
with path decay α = ½ per node on a root and node decay β = ½ (score × (1 − β^d)
at distance d from a chosen node), one level of branching, continuations cut so
no turn exceeds max_new_tokens. On tool episodes (`:tool_lookup`) a branch point is
a token the policy sampled inside a model turn (tool results are never
candidates and take no path position); the branch is forced the root episode's
exact path before it (earlier turns, tool results, the turn's start), its finished
turns are replayed into a fresh environment, and the episode goes on with tool
calls; the reward is the environment's. Credit (score signal "branch_tree",
transform "cbpo", `rlvr_jax.core.cbpo`): GRPO advantages over the whole group
(roots and branches); CBV = population std of the node group's rewards; factor =
clip(CBV / mean CBV, s_min = 0.1, s_max = 3); a token shared by several rows (the
parent's prefix before a branch point) is held by the parent and credited once
with the mean advantage of the rows through it (GRPO's net credit there); tool
results are context and never credited. Token PPO clip ε = 0.2. Not here: the
paper's ten benchmarks (math reasoning, knowledge-intensive search) and its models.
Logged per step: rollout/branches_per_root, rollout/node_cbv (mean CBV of the
nodes' groups), rollout/node_contrast (share of nodes whose group disagrees),
rollout/branched (share of branch rows) with the reward / pass rate of branch rows
against roots (rollout/branched_reward, rollout/not_branched_*); on episodes also
rollout/turns.

Command: python -m rlvr_jax.main --config=experiments/cbpo/cbpo.py --workdir=runs/cbpo
Variants: `:arithmetic`; `:tool_lookup` (multi-turn tool episodes on the warm-start
tool_lookup agent base, 32 tokens per turn, as experiments/agentic/tool_lookup.py);
`:pulse` and `:tool_lookup,pulse` (tiny random model, 2 steps, G = 8 kept).
Tested: tests/rollout/test_branching.py (single-turn) and test_branching_episodes.py
(episodes: every branch copies its parent's exact path up to a sampled token, its
sampled tokens' μ equal teacher forcing on that context, the budget cap, the tree
credit is row-order free and zero on tool results), tests/rl/test_branch_tree.py
(credit by hand), and both pulses in tests/rl/test_rollout_experiments.py (the
tool pulse asserts every branch point is a sampled token and some branches resume
after a tool result).
Checked (not a measurement of the method): 2 steps of `:tool_lookup` on the warm start
with 4 prompts x G = 8 (`--config.train.steps=2 --config.data.prompts_per_step=4
--config.eval.at_start=False --config.eval.num_problems=4 --config.eval.n_samples=2`,
taskset -c 0, 84 CPU s, wall 5m34s under load) ran end to end: 3.0 branches per root,
mean branch point at sampled-token position 31.5 and 17.7 (a turn holds ≤ 32),
mean node CBV 0.157, a third of the nodes with contrast, 3.9 turns per episode.
Runtime: two sampler passes per step (roots, then branches; a branch decodes the
full budget before its cut), ~1.5x GRPO's CPU time in the single-turn run below.

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
Reproduction page (docs/reproductions/cbpo.md, `python scripts/reproduce.py cbpo
--seeds 0`, 2026-12-04, one seed): single-turn Countdown, 20 steps of 32 prompts x 8,
256 test problems x 8: pass@1 29.9 (CBPO) vs 34.4 (GRPO), pass@8 60.5 vs 53.9, mean
node CBV 0.120; on tool_lookup episodes (`:tool_lookup`, 10 steps of 16 x 8, 64 test
problems x 8, against experiments/agentic/tool_lookup.py): pass@1 57.4 vs 59.2, pass@8
98.4 vs 100.0, mean node CBV 0.161 (221 and 354 CPU s for the CBPO runs). No verdict
with one seed per arm.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract: two
unnamed scales), G = 16 with the root share above (4 roots); `:paper` on math_file
(single-turn, the abstract's math benchmarks), `:tool_lookup,paper` on tool episodes
with 1024 new tokens per turn (ours; the abstract's search benchmarks are not built);
the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

VARIANTS = (
    *("", "countdown", "arithmetic", "pulse", "paper"),
    *("tool_lookup", "tool_lookup,pulse", "tool_lookup,paper"),
)
PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(map(repr, VARIANTS))}")
    parts = variant.split(",")
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
    if "tool_lookup" in parts:  # branches inside model turns of tool episodes (the paper's)
        c.model.domain = c.task.name = "tool_lookup"
        c.rollout.max_new_tokens = 32  # per turn (the warm start's)
    base = next((p for p in parts if p in ("pulse", "paper")), parts[0].replace("tool_lookup", ""))
    tool = dict(task=None, max_new_tokens=1024) if "tool_lookup" in parts else {}  # ours: per turn
    apply_variant(c, base, paper={**PAPER, **tool})
    if "pulse" in parts:
        c.data.group_size = 8  # the pulse keeps G = 8: 2 roots, 3 nodes of 2 branches each
    if parts == ["tool_lookup", "pulse"]:  # as experiments/agentic/tool_lookup.py:pulse
        c.task.name = "tool_lookup"
        c.task.options = '{"num_lookups": 1, "max_name_syllables": 1, "instructions": false}'
        c.rollout.max_new_tokens = 12
    return c
