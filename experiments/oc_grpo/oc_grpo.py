"""OC-GRPO (Off-Context GRPO) on the warm-start Countdown base: guided rollouts, unguided objective.

OC-GRPO generates some rollouts with privileged guidance (a reference-solution
prefix) in the prompt and trains the unguided policy on them, the PPO surrogate
weighted by a truncated importance weight w = π_old(y_t|x) / μ(y_t|x, guide)
(loss "oc_grpo", `core.off_context`).

Paper-fixed (abstract): guided rollouts from the prompt with privileged
guidance (e.g. solution prefixes), the objective of the unguided prompt, an
importance-corrected, truncated update.
Ours: the rollout "guided" (`rlvr_jax.rollout.guided`) guides the first half of
every group (rollout.guided.fraction = 0.5) with the prompt
"{prompt}\\nThe solution begins:\\n{solution_prefix}", the first half of the
reference solution's lines (prefix_frac = 0.5); each guided row keeps the
log-probs it was sampled with as μ and is laid out with the unguided prompt,
whose π_old the trainer recomputes (loss.recompute_old_logps). The decoupled
PPO form, token-level weights (level "token"), cap C = 2, floor 0, ε = 0.2;
GRPO advantages, G = 8.
Logged per step: the guided rows' weight mean and truncated share
(is_weight@guided, is_truncated@guided), their reward and pass rate against the
unguided rows (rollout/guided_reward, rollout/not_guided_reward, ...).

Arm `:cliff` (the paper's setting, issue 31): guidance only where the model is at
its learning cliff. Every row is sampled unguided first; a group with no correct
row has its first half re-sampled guided (rollout.guided.only_cliffs), on the
privileged-context view the base was trained with (role "privileged": SFT saw
"{prompt}\nReference solution:\n{solution}"), shown the first half of the
solution's lines and never its answer line (answer_free). On those groups the
unguided pass rate is 0, so rollout/guided_pass_rate is what guidance rescued.

Command: python -m rlvr_jax.main --config=experiments/oc_grpo/oc_grpo.py --workdir=runs/oc_grpo
Variants: `:half` (= ""), `:cliff`, `:arithmetic`, `:pulse` (tiny random model, 2 steps),
combined as `:cliff,pulse`.
Runtime: not measured (a grpo.py run plus one old-log-prob forward per step).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model), solution-prefix guidance from math_file solutions; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config, split_arm

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


ARMS = ("half", "cliff")  # half of every group guided (ours); only cliff groups (the paper)
CLIFF_VIEW = "{prompt}\nReference solution:\n{solution_prefix}"  # the privileged SFT wording


def get_config(variant: str = ""):
    arm, variant = split_arm(variant, ARMS)
    c = default_config()
    c.rollout.name = "guided"
    c.rollout.guided.fraction = 0.5  # guided share of each group (ours)
    c.rollout.guided.template = "{prompt}\nThe solution begins:\n{solution_prefix}"  # ours
    c.rollout.guided.prefix_frac = 0.5  # share of the reference solution's lines (ours)
    c.loss.recompute_old_logps = True  # π_old on the unguided prompt (μ: the guided one)
    c.credit.name = "grpo"
    c.loss.name = "oc_grpo"
    c.loss.oc_grpo.cap = 2.0  # C: truncation of w (ours)
    c.loss.oc_grpo.floor = 0.0  # w_min (ours)
    c.loss.oc_grpo.eps_low = 0.2  # ε
    c.loss.oc_grpo.eps_high = 0.2
    c.data.group_size = 8  # G
    if arm == "cliff":
        c.rollout.guided.only_cliffs = True  # guide all-fail groups only, after a plain pass
        c.rollout.guided.answer_free = True  # never the solution's last (answer) line
        c.rollout.guided.template = CLIFF_VIEW
    return apply_variant(c, variant, paper=PAPER, self_teacher=arm == "cliff")
