"""SpyRL (RLSVR: "From RLVR to RLSVR", Self-PlaY RL) on the warm-start "who is the spy" base.

RLSVR turns an open-ended task into a proxy environment whose rules produce the
reward. SpyRL's environment is the social deduction game "Who is the spy?": players
get asymmetric information, all do the same target task, then vote to find a
designated spy; because the spy is fixed in advance, the vote outcome is a fully
verifiable reward, and winning it depends on the quality of what each player wrote.

Paper-fixed (abstract): the game (asymmetric information, the same task for all,
a vote, a predetermined spy), self-play by one policy, rewards from the vote outcome
only (no judge, no reward model), RL on those rewards.
Ours (the abstract is silent; the reference code was not available to us):
  - the target task: describing a generated record (task `spy_describe`,
    `rlvr_jax.tasks.spy`: a creature / plant / town whose civilian and spy versions
    differ in one attribute; descriptions must not name the secret word), 3 players
    and 4 attributes (the warm start's options); the spy is not told its role
    (spy_knows = False, the classic game);
  - the rollout "self_play" (`rlvr_jax.rollout.self_play`): G = 12 rows per prompt =
    2 games x 3 players x 2 turns (describe, vote), two sampler calls per step; rewards
    per row: civilians 1 iff the spy is eliminated (plurality, a tie eliminates
    nobody), the spy 1 iff it survives, 0 for a description that names its word or is
    empty; both turns trained; four groups per prompt (civilians' / spy's describe /
    vote rows across the 2 games), GRPO advantages within each;
  - GRPO credit, token PPO clip ε = 0.2, lr 1e-4, 2 minibatches per step, no KL;
  - the base: SFT on both turns of reference games (spec ("spy_describe", "base"),
    400 steps, `rlvr_jax.train.warmstart_specs`).
Evaluation (every run on spy_describe, `rollout.EVALUATORS`): the task's pass@k (a
civilian's vote on reference descriptions), and games against the frozen initial
policy: game/detection_rate (current civilians vs the initial spy),
game/spy_survival (the current spy vs the initial civilians),
game/civilian_vote_accuracy, game/vote_parsed, game/leak_rate, game/description_valid.
Logged per train step: rollout/spy_reward and rollout/not_spy_reward (spy vs civilian
rows), rollout/vote_reward, rollout/civilian_voted_spy (the civilians' vote accuracy),
rollout/spy_survived, rollout/vote_parsed, rollout/leaked, rollout/described.

Arms (`file.py:arm[,base]`): `spyrl` (default) and `grpo` (the self-improvement
baseline at the same rollout budget: GRPO with the plain rollout on the task's own
verifiable form, a civilian's vote on reference descriptions, B x G = 10 x 12 rows per
step; it never plays a game in training). Base variants: "" (CPU), `pulse` (tiny
random model, 2 steps, G = 12), `paper` (Qwen3-8B from a user-given checkpoint on a
TPU v5p slice, `rl/paper_scale.py`'s shared block, 4 players and 6 attributes, G = 16,
256 new tokens: every value ours, the abstract fixes none).

Command: python -m rlvr_jax.main --config=experiments/spyrl/spyrl.py --workdir=runs/spyrl
Runtime: ~3 CPU-minutes per arm (10 steps and two evaluations, below), after the
warm start (216 CPU s of SFT, trained once and cached; docs/base_models.md).

Measured (one seed, a miniature, not a reproduction): SpyRL vs the GRPO arm at an equal
rollout budget (10 steps x 120 rows; the select round pads each step to 128 sampled rows),
from the same warm start; evaluation on 64 test problems (pass@k: 4 votes each at
temperature 1; games: 64 per side, one per problem, against the frozen initial policy).
Each run as
  taskset -c 0 nice -n 10 python -m rlvr_jax.main --config=experiments/spyrl/spyrl.py:<arm>
    --workdir=runs/mini_<arm> --config.checkpoint.export_final=False
on this 2-core CPU shared with other jobs (core 0, ~15% of it: ~17 min wall per arm):
  arm    detection  spy survival  civ. vote acc.  pass@1  pass@4  leak  valid  CPU (user+sys)
  start  0.188      0.797         0.305           0.289   0.719   0.0   1.0    -
  SpyRL  0.188      0.797         0.289           0.285   0.766   0.0   1.0    179 s
  GRPO   0.297      0.781         0.398           0.297   0.766   0.0   1.0    183 s
(detection: the trained civilians vs the initial spy; spy survival: the trained spy vs the
initial civilians; both with the same 64 games and key, so a policy that barely moved
repeats the start's outcomes.) During SpyRL's training the civilians' vote accuracy was
0.15-0.43 and the spy survived 65-100% of the step's 20 games; no description leaked or was
empty, 97-100% of votes parsed. With 2 games per prompt, a prompt's four role groups are
constant whenever both games end alike, which was most of them (step 5: the spy survived
all 20 games and the gradient was 0); SpyRL's gradient norm was 0-0.20 per step, GRPO's
0.24-0.35. One seed and 64 games per side (standard error ~0.05): no
improvement of SpyRL over its start or over GRPO is resolved here. More games per prompt
should give more non-constant groups: a run with 4 games per prompt at the same budget
(--config.data.prompts_per_step=5 --config.data.group_size=24
--config.train.num_minibatches=1) was stopped after its first step for lack of time
(no result).
"""

from rlvr_jax.rl.config import apply_variant, default_config, split_arm

ARMS = ("spyrl", "grpo")
# `:paper` (rlvr_jax/rl/paper_scale.py; the abstract names no model, batch or optimizer):
# every value ours, on the shared DAPO-recipe block.
PAPER = dict(
    model="qwen3-8b",  # ours
    task=None,  # keep spy_describe (4 players, 6 attributes)
    group_size=16,  # ours: 2 games x 4 players x 2 turns
    max_new_tokens=256,  # ours: a description or a vote is short
)


def get_config(variant: str = ""):
    arm, base = split_arm(variant, ARMS)
    c = default_config()
    c.model.domain = "spy_describe"  # the warm start of both turns
    c.task.name = "spy_describe"
    c.rollout.name = "self_play" if arm == "spyrl" else "plain"
    c.rollout.self_play.civilian_vote = "outcome"  # a civilian's vote row: the team's outcome
    c.rollout.max_new_tokens = 32  # a description or a vote is ~15-25 tokens
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = c.loss.ppo_clip.eps_high = 0.2  # ε
    c.data.prompts_per_step = 10  # B (B x G = 120 rows: the select round pads to 128)
    c.data.group_size = 12  # G: 2 games x 3 players x 2 turns (grpo arm: 12 votes)
    c.train.steps = 10
    c.eval.every = 0
    c.eval.num_problems = 64  # also the number of games per evaluation side
    c.eval.n_samples = 4
    if base == "paper":  # the task's full game (ours: the abstract gives no game size)
        c.task.options = '{"num_players": 4, "num_attributes": 6}'
    c = apply_variant(c, base, paper=PAPER)
    if base == "paper":
        return c
    if base == "pulse":
        c.task.name = "spy_describe"  # apply_variant's pulse task is arithmetic
        c.task.options = '{"num_players": 3, "num_attributes": 4}'
        c.data.prompts_per_step = 2
        c.data.group_size = 12  # 2 games of 3 players per prompt
        c.rollout.max_new_tokens = 12
    return c
