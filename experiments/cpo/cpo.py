"""CPO (Contrastive Policy Optimization) on the privileged warm-start Countdown base, in three arms.

Reproduces, in miniature, CPO against GRPO and against entropy-based advantage
shaping (experiments/cpo/entropy_shaping.py, the baseline the paper compares
with): the disagreement d_t = ℓ^G − ℓ^S between the policy under a
reference-guided context and the plain policy on each sampled token shapes the
advantage by the rollout's verdict, A'_t = β·A_t + λ_{c_i}·τ·tanh(d_t/τ). The
term does not depend on A_t, so zero-variance groups still get a signal.

Arms (the abstract: correct responses support exploration, incorrect ones
exploitation, and balancing both is best), the variant names:
  balanced (default)  λ_correct = λ_wrong = 0.1
  correct_only        λ_correct = 0.1, λ_wrong = 0: only correct rollouts get the term
  wrong_only          λ_correct = 0, λ_wrong = 0.1: only failed rollouts get it

Paper-fixed (abstract): guided-vs-plain token disagreement, correctness-aware
shaping, signal in zero-variance groups, OPD as the special case of an external
teacher, the correct/wrong balance.
Ours: the functional form above with β = 1, λ = 0.1 per side ("balanced" = equal
weights), τ = 1; the guided view "{prompt}\\nReference solution:\\n{solution}"
(the arithmetic hint's wording, so it also works on Countdown); GRPO
advantages, token PPO clip ε = 0.2, G = 8.

Command: python -m rlvr_jax.main --config=experiments/cpo/cpo.py:wrong_only --workdir=runs/cpo_w
Variants: an arm and/or `arithmetic` / `pulse` (tiny random model, 2 steps; the guided
policy is the policy itself, so no variant needs a trained teacher), comma-separated,
e.g. `:correct_only,arithmetic`.
Runtime: not measured; grpo.py's plus one policy forward per batch.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model), the policy under the reference solution as the guided view (math_file
solutions); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import SOLUTION_VIEW, apply_variant, default_config, split_arm

# arm -> (λ_correct, λ_wrong)
ARMS = {"balanced": (0.1, 0.1), "correct_only": (0.1, 0.0), "wrong_only": (0.0, 0.1)}


PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    arm, base = split_arm(variant, ARMS)
    c = default_config()
    c.score.signals = "hint"  # hint_logps_BxT = ℓ^G, the reference-guided policy
    c.score.hint.template = SOLUTION_VIEW
    c.score.hint.correct_template = ""  # the same guided view for every row
    c.credit.name = "grpo"
    c.credit.transforms = "cpo"
    c.credit.cpo.beta = 1.0  # β, weight of A_t (ours)
    c.credit.cpo.lam_correct, c.credit.cpo.lam_wrong = ARMS[arm]  # λ_correct, λ_wrong (ours)
    c.credit.cpo.tau = 1.0  # τ of τ·tanh(d/τ) (ours; 0 = unbounded d)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, base, paper=PAPER, self_teacher=True)
