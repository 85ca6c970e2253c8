"""Agentic RL: GRPO on multi-turn tool_lookup episodes with the warm-start tool_lookup base.

Each rollout is an episode: the policy writes a turn, the environment
(`tasks.tools.ToolEnv`) answers a lookup or a calculation as a `tool` message,
until the policy answers or runs out of turns (`rlvr_jax.rollout.multiturn`,
rollout "multi_turn"). The reward is the environment's final reward;
environment tokens are context, never in the loss mask; every turn's sampled
log-probs are μ = π_old. Any estimator and loss apply (GAE skips the
environment-token gaps).

Ours: GRPO (G = 8) with the token PPO clip as grpo.py; max_new_tokens = 32 per
turn (the warm start's); the task's turn limit (max_turns + 1 model turns);
evaluation runs whole episodes too (train.multiturn.evaluate_episodes).
Logged per step: turns per episode (rollout/turns).

Command: python -m rlvr_jax.main --config=experiments/agentic/tool_lookup.py --workdir=runs/tool
Variants: `:pulse` (a tiny random model on tool_lookup, 2 steps).
Measured (docs/baselines.md, 3 seeds, a miniature of this config: 10 steps of 16 × 8,
evaluation on 64 problems): held-out pass@1 43.7% -> 46.9%, a gain of +3.3 ± 0.9 points
(sd; +2.5..+4.3), ~460 CPU s per run (`python scripts/reproduce.py agentic --pin 1`).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours: tool_lookup is our
environment, no paper fixes it) on the tool_lookup task, 1024 new tokens per turn
(ours); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

VARIANTS = ("", "pulse", "paper")


PAPER = dict(
    model="qwen3-8b",  # ours
    task=None,  # tool_lookup: the multi-turn environment
    max_new_tokens=1024,  # ours: per turn
)


def get_config(variant: str = ""):
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(map(repr, VARIANTS))}")
    c = default_config()
    c.model.domain = c.task.name = "tool_lookup"
    c.rollout.name = "multi_turn"
    c.rollout.multi_turn.max_turns = 0  # 0 = the task's episode_turns()
    c.rollout.max_new_tokens = 32  # per turn
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    c.train.steps = 20
    if variant == "paper":
        apply_variant(c, "paper", paper=PAPER)
    if variant == "pulse":
        apply_variant(c, "pulse")
        c.task.name = "tool_lookup"
        c.task.options = '{"num_lookups": 1, "max_name_syllables": 1, "instructions": false}'
        c.rollout.max_new_tokens = 12
    return c
