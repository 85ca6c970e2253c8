"""Rollout stage: multi-turn episodes against an environment (agentic rollouts)."""

from rlvr_jax.rollout.multiturn import (
    Episodes,
    cut_at_stop,
    observation_ids,
    observation_text,
    run_episodes,
)

__all__ = ["Episodes", "cut_at_stop", "observation_ids", "observation_text", "run_episodes"]
