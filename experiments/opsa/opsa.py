"""OPSA (On-Policy Self-Adaptation) on the warm-start Countdown base: OPD's gain without a teacher.

Reproduces, in miniature, the paper's claim that on-policy distillation works
mostly by pushing down low-probability sampled tokens, so one fixed negative
advantage scaled by the policy's own entropy matches it: every sampled token
gets A_t = −c·H_t / mean(H) and no reward enters the update. Compare pass@1
with the OPD ablations below and with experiments/baselines/grpo.py.

Paper-fixed (abstract): supervision-free, negative, entropy-adaptive advantage.
Ours: c = 1; mean(H) over the batch's response tokens (per_row = False); the
result replaces the RL advantage (rl_coef = 0: OPSA is run as an OPD
replacement, without the verifier's reward); token PPO clip ε = 0.2, G = 8.

Ablations (config overrides):
  fixed negative advantage   --config.credit.opsa.entropy_scaled=False
  plain OPD                  --config.credit.transforms=opdvr --config.credit.opdvr.gate=none
                             --config.score.signals=teacher
  OPD, noisy tokens removed  --config.credit.transforms=opd_denoised --config.score.signals=teacher
The OPD rows use the warm-start Countdown teacher (score.teacher defaults); their
teacher-noise statistics (`core.opsa.teacher_noise_stats`, verdict criterion) are
logged every step as teacher/noise_frac, _correct and _wrong. The distribution-level
OPD rows are experiments/opdvr/opd_full_kl.py and opd_topk_kl.py.

Command: python -m rlvr_jax.main --config=experiments/opsa/opsa.py --workdir=runs/opsa
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: not measured; grpo.py's (no extra forward pass).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-1.7B (paper), Avg@32 / Pass@32
(paper: eval.n_samples = 32); c as above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen3-1.7b",  # paper: the base Qwen3-1.7B
)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"  # computed, then replaced (rl_coef = 0)
    c.credit.transforms = "opsa"
    c.credit.opsa.c = 1.0  # c: magnitude of the negative advantage (ours)
    c.credit.opsa.entropy_scaled = True  # × H_t / mean H (False: the fixed −c ablation)
    c.credit.opsa.per_row = False  # mean H over the batch
    c.credit.opsa.rl_coef = 0.0  # weight of the verifier's advantage (ours: none)
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.eval.n_samples = 32  # paper: Avg@32, Pass@32
    return c
