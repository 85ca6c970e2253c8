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
    c.score.signals = "answers,majority_vote"  # answer ids, then rewards_B from the vote
    c.credit.name = "grpo"  # normalises the vote rewards within each group
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G: rollouts, and voters, per prompt
    return _om_grpo.apply_ttt(c, variant)
