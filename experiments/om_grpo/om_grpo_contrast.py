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
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Test-time training (variant suffix "ttt": `:ttt`, `:arithmetic+ttt`, `:pulse+ttt`):
the prompt pool is the eval prompts themselves (task.train_split = "test",
task.train_size = eval.num_problems), trained on without their labels and
evaluated on after training (and before, eval.at_start): the paper's
unlabeled test-time setting. config.validate refuses a test-split pool unless
the reward is label-free.
Runtime: not measured; grpo.py's.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract: three
unnamed backbones) on math_file, answers canonicalised as text (math-verify is the
verifier, not the consensus key); `:paper+ttt` trains on the 500 eval problems; the
shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


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
    return apply_ttt(c, variant)


def apply_ttt(c, variant: str):
    """`variant` with an optional "+ttt" / "ttt" suffix: train on the unlabeled eval prompts."""
    base = variant.removesuffix("ttt").removesuffix("+")
    apply_variant(c, base, paper=PAPER)
    if variant.endswith("ttt"):
        c.task.train_split = "test"  # the eval split: the prompts reported on
        c.task.train_size = c.eval.num_problems  # exactly those prompts (indices 0..n-1)
        c.eval.at_start = True  # before / after on the same prompts
    return c
