"""TTRL-style majority-vote RL: the label-free baseline OM-GRPO compares with.

Every rollout of a group votes with its canonicalised final answer (score
signal "answers": parsed integers on arithmetic, `countdown.canonical` on
Countdown); the group's most common answer is the pseudo-label and a rollout's
reward is 1 if it gives that answer, else 0 (score signal "majority_vote",
`core.om_grpo.majority_vote_rewards`, replacing the verifier's reward). GRPO
normalises the rewards as usual; every token trains, the answer span included
(what OM-GRPO's masking removes). The verifier only reports: "ttrl/label_accuracy"
(groups whose majority answer is correct) and "ttrl/reward_accuracy" (rows whose
vote reward equals the verdict) are logged every step.

Paper-fixed (TTRL, as OM-GRPO's abstract describes its comparison): majority-vote
pseudo-labels from the policy's own samples, binary rewards, RL on unlabeled
test prompts.
Ours: the votes are the G = 8 rollouts that are trained on (TTRL samples more
votes than it trains on); ties go to the answer seen first in the group; rows
without an answer get 0 and do not vote; token PPO clip ε = 0.2.

Command: python -m rlvr_jax.main --config=experiments/om_grpo/ttrl.py --workdir=runs/ttrl
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
    c.score.signals = "answers,majority_vote"  # answer ids, then rewards_B from the vote
    c.credit.name = "grpo"  # normalises the vote rewards within each group
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G: rollouts, and voters, per prompt
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
