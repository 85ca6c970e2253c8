"""CSCR (Counterfactual Sensitivity Credit Reallocation) on the privileged Countdown base.

Reproduces, in miniature, CSCR against GRPO: each rollout is rescored by the
policy under two privileged contexts, one asserting its answer is correct and
one asserting it is incorrect; the per-token log-prob shifts Δ±_t measure
counterfactual sensitivity s_t, and sensitive (substitutable surface) tokens are
down-weighted, w_t ∝ (1 + s_t)^−α, renormalised so Σ_t w_t = n_i and every sign
is kept: A'_t = w_t·A_t.

Paper-fixed (abstract): two opposing contexts, sensitivity from the shifts,
down-weighting, renormalisation keeping budget and direction, a strength α.
Ours: s_t = ½(|Δ⁺_t| + |Δ⁻_t|) (combine "mean"), α = 1, the token-count budget;
the context wordings of score.cscr_shift (`train.privileged.ASSERTED_*_VIEW`); GRPO advantages,
token PPO clip ε = 0.2, G = 8.

The warm-start bases see both contexts in SFT (docs/base_models.md,
"Privileged-context examples"; on Countdown the "privileged" base, which solves
0.10 under the "correct" note and 0.07 under the "incorrect" one vs 0.15 plain).
Every step logs each context's informativeness in metrics.jsonl under
"cscr_correct/" and "cscr_incorrect/": noise_frac*, r_mean_correct / _wrong and,
on arithmetic, sign_agree* (the sign of ℓ± − ℓ against the exact first mistake;
an informative "incorrect" context has the opposite signs).

Command: python -m rlvr_jax.main --config=experiments/cscr/cscr.py --workdir=runs/cscr
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's plus two policy forwards per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract: long-
CoT math, no model named), N = 8192; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "cscr_shift"  # cf_shift_correct_BxT, cf_shift_incorrect_BxT
    c.credit.name = "grpo"
    c.credit.transforms = "cscr"
    c.credit.cscr.alpha = 1.0  # α (ours)
    c.credit.cscr.combine = "mean"  # s_t = ½(|Δ⁺| + |Δ⁻|) (ours)
    c.credit.cscr.budget = "tokens"  # Σ_t w_t = n_i
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER, self_teacher=True)
