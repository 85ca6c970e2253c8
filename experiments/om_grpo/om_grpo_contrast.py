"""OM-GRPO with the contrast-augmented reward, on the warm-start Countdown base.

experiments/om_grpo/om_grpo.py plus the paper's contrast augmentation: rollouts
of a group with different answers are compared pairwise (no new rollouts) and
the reward becomes r'_i = (1 − λ)·consensus_i + λ·win_i, win_i the rollout's win
rate over its compared pairs; the answer span still gets no gradient.

Paper-fixed (abstract): pairwise comparisons over existing trajectories.
Ours: λ = 0.5; the judge scores a rollout by its answer's consensus share
(score.pair_compare.judge = "consensus", label-free; "verifier" is the labelled
ablation); the rest as om_grpo.py.

Command: python -m rlvr_jax.main --config=experiments/om_grpo/om_grpo_contrast.py --workdir=runs/omc
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps); test-time training
(`:ttt`, `:arithmetic+ttt`, `:pulse+ttt`) and paper scale (`:paper`, `:paper+ttt`) as
experiments/om_grpo/om_grpo.py (its `apply_ttt`).
Runtime: not measured; grpo.py's.
"""

from pathlib import Path

from rlvr_jax import pyfile
from rlvr_jax.rl.config import default_config

_om_grpo = pyfile.load(Path(__file__).with_name("om_grpo.py"), "_om_grpo")
PAPER = _om_grpo.PAPER  # the variants (ttt, paper) are om_grpo.py's


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "answers,pair_compare"  # answers, then pair_wins_BxB / pair_compared_BxB
    c.score.pair_compare.judge = "consensus"  # label-free judge (ours)
    c.credit.name = "grpo"
    c.credit.transforms = "om_grpo_contrast"
    c.credit.om_grpo_contrast.lam = 0.5  # λ (ours)
    c.credit.om_grpo_contrast.leave_one_out = False
    c.credit.om_grpo_contrast.scale_by_std = True
    c.credit.om_grpo_contrast.eps = 1e-6
    c.credit.om_grpo_contrast.mask_answer = True  # no gradient on the answer span
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return _om_grpo.apply_ttt(c, variant)
