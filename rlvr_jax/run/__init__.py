"""Run infrastructure: a workdir's checkpoints, metrics log, report and preemption guard.

Layering: above `train` (SFT, evaluation), below `rl` and `pipeline`; nothing here
imports an RL stage.
"""
