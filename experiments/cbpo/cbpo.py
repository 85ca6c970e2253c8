"""CBPO (Contrastive Branch Policy Optimization), credit part, on the warm-start Countdown base.

Reproduces, in miniature, CBPO's credit rule against GRPO: rollouts of a group
that share an exact response prefix form a branch node; the reward spread of
the rows through a node (its Contrastive Branch Value) rescales the advantages
of the continuation after it without changing their sign, and several nodes on
one path cut it into non-overlapping credit segments (shared prefix tokens are
credited by one row only).

What the code does today: no rollout branches. The G responses of a prompt are
sampled independently, and the "branches" are the prefixes they happen to share
(coincidental shared prefixes, found by a trie over each group's responses);
CBPO's real branching (resampling continuations from chosen prefixes) is not
built yet. With dedupe_prefix = True the shared prefix of a node is credited to
its first member in row order (the lowest row index keeps the tokens, the others
get 0 there), so the credit of a shared prefix depends on the arbitrary row
order of the group.

Paper-fixed (abstract): exact-prefix branch groups, CBV from their reward spread,
sign-preserving rescaling, non-overlapping segments.
Ours: nodes are the branching points of each group's trie of independently
sampled responses (score signal "branches"; K = B node slots, min prefix 1
token); CBV = population std of the members' rewards; factor =
clip(CBV / mean CBV, 0.1, 3); GRPO advantages, token PPO clip ε = 0.2, G = 8.
Not here: the rollout side (branching at entropy-screened positions with
path-/node-level budget decay; until it lands, branches are coincidental shared
prefixes), and the multi-turn tool tasks of the paper: run
--config.task.name=tool_lookup --config.model.domain=tool_lookup for those.

Command: python -m rlvr_jax.main --config=experiments/cbpo/cbpo.py --workdir=runs/cbpo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's (the trie is host-side).
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "branches"  # branch_member_KxB, branch_pos_K, branch_start_B
    c.score.branches.max_nodes = 0  # K = B: no node dropped
    c.score.branches.min_prefix = 1  # shortest shared prefix that makes a node
    c.score.branches.dedupe_prefix = True  # shared tokens credited once (to the first row)
    c.credit.name = "grpo"
    c.credit.transforms = "cbpo"
    c.credit.cbpo.s_min = 0.1  # lower clip of the CBV factor (> 0: sign kept; ours)
    c.credit.cbpo.s_max = 3.0  # upper clip (ours)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
