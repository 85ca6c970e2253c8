"""GAPO (Group Adaptive Clipping Policy Optimization), token PPO form, on the Countdown base.

Reproduces, in miniature, GAPO against GRPO with a fixed clip: each rollout gets
its own clip range that grows with its advantage, so rollouts carrying a large
learning signal |A_i| get more update headroom. Logged per step: the clip
fractions (clip_low_frac / clip_high_frac), the mean bounds eps_low / eps_high,
and the clip rates by group success rate as the paper reports them
(clip_high_frac@pos_pass0-25 ... @pos_pass75-100 over correct, positive-advantage
rollouts; clip_low_frac@neg_pass... over negative ones; score signal
"group_success").

Paper-fixed (abstract): keep the PPO / GSPO surrogate, adapt only the clip
range per rollout, larger for larger |A_i|.
Ours (docs/methods.md): ε_i = clip(ε·|A_i| / Ā, ε_min, ε_max) on each side, ε = 0.2 (the
PPO value it adapts), [ε_min, ε_max] = [0.1, 0.5]; Ā = mean |A_j| over the
whole minibatch's rows with A_j ≠ 0, computed before its micro-batches (so the
bounds do not depend on train.micro_batch_size; loss.gapo.ref_scale > 0, e.g. 1
for std-normalised GRPO advantages, fixes Ā instead).
GRPO advantages, G = 8, two minibatch updates per batch (so clipping is active),
no KL (grpo.py's choices).

Command: python -m rlvr_jax.main --config=experiments/gapo/gapo.py --workdir=runs/gapo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps), `:code` (the synthetic
code task on its base, rewards from the sandbox; `:code,pulse`;
`:code,paper`: the paper scale on your code file with the code suite). The GSPO form
is experiments/gapo/gapo_gspo.py.
Runtime: not measured; grpo.py's (the bounds are elementwise).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract:
unnamed Qwen and Llama models); ε0 and the bounds as above; the shared block's 16
updates per step (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_code_task, apply_variant, code_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "gapo"
    c.loss.gapo.eps_low = 0.2  # ε_low at |A_i| = Ā
    c.loss.gapo.eps_high = 0.2  # ε_high at |A_i| = Ā
    c.loss.gapo.eps_min = 0.1  # ε_min (ours)
    c.loss.gapo.eps_max = 0.5  # ε_max (ours)
    c.loss.gapo.ref_scale = 0.0  # Ā: 0 = the minibatch's mean |A_j| over A_j ≠ 0
    c.score.signals = "group_success"  # for the clip rates by group success rate
    c.loss.aggregation = "seq-mean-token-mean"
    c.data.group_size = 8  # G
    c.train.num_minibatches = 2
    base, paper = code_variant(variant, PAPER)
    apply_variant(c, base, paper=paper)
    apply_code_task(c, variant)
    return c
