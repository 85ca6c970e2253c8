"""Analyses across checkpoints ("Locked at the Entrance"): likelihood shift, entrance-prefix
intervention, late-layer interpolation, and `analyze_entrance`, which runs them all.

Sits above `rl` in the layering (it reads RL run workdirs and rebuilds their policies).
"""
