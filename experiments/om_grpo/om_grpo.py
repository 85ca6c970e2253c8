"""OM-GRPO (Outcome-Masked GRPO, "Don't Peek at the Answer") on the warm-start Countdown base.

Reproduces, in miniature, label-free RL against majority-vote RL (TTRL-style) and
verifier GRPO: the reward of a rollout is the share of its group giving the same
(canonicalised) answer, and the answer span gets no gradient, so the policy
cannot raise its reward by reinforcing the answer tokens themselves. The verifier
only reports pass rates. The contrast-augmented reward is
experiments/om_grpo/om_grpo_contrast.py.

Paper-fixed (abstract): soft consensus reward, no gradient on the answer span,
contrast augmentation from pairwise comparisons of existing rollouts.
Ours: consensus n_{a_i}/n_g with self included (leave_one_out = False), GRPO
normalisation of those rewards (std, ε = 1e-6); Countdown answers compared by
`countdown.canonical`; token PPO clip ε = 0.2, G = 8.

Command: python -m rlvr_jax.main --config=experiments/om_grpo/om_grpo.py --workdir=runs/om_grpo
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
    c.score.signals = "answers"  # answer_id_B, answer_start_B, answer_end_B
    c.credit.name = "grpo"  # the verifier's advantage, replaced by the transform
    c.credit.transforms = "om_grpo"
    c.credit.om_grpo.leave_one_out = False  # n_{a_i}/n_g, self included (ours)
    c.credit.om_grpo.scale_by_std = True
    c.credit.om_grpo.eps = 1e-6
    c.credit.om_grpo.mask_answer = True  # no gradient on the answer span
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
