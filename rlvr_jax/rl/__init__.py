"""The RL trainer: stage registries (select, rollout, score, credit, update) and the host loop.

Import `rlvr_jax.rl.trainer.train` to run an experiment config; the stage
modules are importable on their own (no trainer state in them).
"""
