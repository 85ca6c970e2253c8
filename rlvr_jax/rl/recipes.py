"""Recipes a method is built on, applied on top of an experiment config.

A method that wraps "the policy update" is compared like for like only on the
recipe of the arm it is compared with: LSPO on DAPO against DAPO, LSPO on GRPO
against GRPO. `dapo` is DAPO's recipe as `experiments/baselines/dapo.py` uses it,
so a method on DAPO and the DAPO baseline share every recipe field.
"""

from __future__ import annotations

import ml_collections


def dapo(
    c: ml_collections.ConfigDict, clip: ml_collections.ConfigDict
) -> ml_collections.ConfigDict:
    """DAPO (Yu et al. 2025) on `c`, in place; `clip` is the loss's options block
    holding eps_low / eps_high (`c.loss.ppo_clip`, or a wrapping loss's own).

    clip-higher ε_low = 0.2, ε_high = 0.28 (paper values); token-level loss
    ("token-mean"); dynamic sampling keeping groups with 0 < #correct < G by
    verdict, refilling missing prompts for at most 10 rounds (ours; the paper
    samples until full); the soft overlong penalty over the last L_cache = 16
    tokens (paper: 4k of 20k; ours scaled to our lengths). No KL term.
    """
    clip.eps_low = 0.2  # ε_low
    clip.eps_high = 0.28  # ε_high (clip-higher)
    c.loss.aggregation = "token-mean"
    c.select.name = "dynamic_sampling"
    c.select.dynamic_sampling.keep = "verdict"  # 0 < #correct < G (DAPO)
    c.select.max_rounds = 10  # cap on resampling rounds (ours)
    c.reward.overlong_cache = 16  # L_cache
    c.reward.overlong_penalty = 1.0
    return c
