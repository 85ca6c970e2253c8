"""RLSD (the self-teacher sets magnitudes, the verifier directions): H²SD's comparison row.

The self-teacher (the policy under the reference-solution view, score signal
"hint") only reweights each token's GRPO advantage, on correct and wrong
rollouts alike, so the sign of every token's advantage is the verifier's and no
distillation term pushes the policy toward the teacher. RLSD's reference rule
(transform "rlsd", rule "reference", `core/rlsd.py`): A'_t = A_i·w_t,
w_t = 1 + λ·(clip(exp(sign(A_i)·(ℓ^H − ℓ^S)), 1 − ε, 1 + ε) − 1), ε = 0.2,
λ = 0.5: on a failed rollout the tokens the teacher finds unlikely take more of
the penalty. H²SD differs by its hindsight rephrasing view on successes and the
reverse KL on failures.

Our earlier rule, the h2sd page's first RLSD arm (`rlsd_magnitude`), is the
option `credit.rlsd.rule = "magnitude"`: m_t = clip(exp(ℓ^H − ℓ^S), a, b)
renormalised to mean 1 over the row whatever the sign (H²SD's success-side
modulation on every row), so on failed rows those tokens take less.

Paper-fixed (H²SD's abstract, describing RLSD): modulation by the self-teacher,
directions from the verifier; no reverse KL. RLSD's reference code: the sign(A)
orientation, ε = 0.2, λ = 0.5.
Ours: the reference-solution
view for every row (`train.privileged.SOLUTION_VIEW`), GRPO advantages, token
PPO clip ε = 0.2, G = 8.

Command: python -m rlvr_jax.main --config=experiments/h2sd/rlsd.py --workdir=runs/rlsd
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps; the teacher is the
policy itself, so no variant needs a trained teacher).
Runtime: not measured; grpo.py's plus one policy forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours); the shared block
(ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config
from rlvr_jax.train.privileged import SOLUTION_VIEW

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.score.signals = "hint"  # ℓ^H under the reference-solution view, every row
    c.score.hint.template = SOLUTION_VIEW
    c.score.hint.correct_template = ""  # the same view on correct rows
    c.credit.name = "grpo"
    c.credit.transforms = "rlsd"
    c.credit.rlsd.rule = "reference"  # RLSD's; "magnitude": ours, below
    c.credit.rlsd.eps = 0.2  # ε: w clipped to exp(±d) within [1 − ε, 1 + ε]
    c.credit.rlsd.lam = 0.5  # λ: w = 1 + λ(clip(...) − 1)
    c.credit.rlsd.low = 0.5  # a (rule "magnitude", as H²SD)
    c.credit.rlsd.high = 2.0  # b
    c.credit.rlsd.renorm = True  # mean m_t = 1 per row (rule "magnitude")
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER, self_teacher=True)
