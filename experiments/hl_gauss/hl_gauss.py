"""PPO with an HL-Gauss categorical critic ("categorical critics") on the warm-start Countdown base.

Reproduces, in miniature, the categorical-critic row against the scalar critic of
experiments/baselines/ppo.py: the value head predicts logits over m bins of
[v_min, v_max] and is trained by cross-entropy to HL-Gauss targets (the mass of
N(R_t, σ²) on each bin, σ = 0.75 bin widths); the value is the expected bin
centre. Every step logs the critic's Brier score and expected calibration error
against the verdicts (`rl.critic.calibration_metrics`: "critic/brier",
"critic/ece" over the response tokens, "critic/brier_first", "critic/ece_first"
at the first one), the value read as a success probability on [v_min, v_max].

Paper-fixed (docs/methods.md): HL-Gauss targets with σ = 0.75 bin width, cross-entropy,
value = expectation.
Ours: m = 51 bins on [0, 1], the verifier's reward range (returns outside it
are clipped to it, e.g. with an overlong penalty); the rest is ppo.py's: GAE
(γ = 1, λ = 0.95), whitened advantages, clip ε = 0.2, token-mean loss, critic lr
3e-4, 5 critic-only warm-up steps.
Controls (the paper's, same categorical head; `core.hl_gauss.targets`):
  --config.critic.loss=two_hot | one_hot | bernoulli  (bernoulli: 2 bins valued v_min, v_max)
  --config.critic.loss=mse                            the scalar critic of ppo.py

Command: python -m rlvr_jax.main --config=experiments/hl_gauss/hl_gauss.py --workdir=runs/hl_gauss
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps, 1 critic warm-up step).
Runtime: not measured; ppo.py's.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B policy and critic (ours;
the abstract: Qwen2.5 and Qwen3 backbones), m, σ and the support as above; critic lr
1e-5 (ours). The memory plan covers the policy only.
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(model="qwen3-8b")  # ours: the abstract names no model


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "gae"
    c.credit.gae.gamma = 1.0  # γ
    c.credit.gae.lam = 0.95  # λ
    c.credit.gae.whiten = True
    c.loss.name = "ppo_clip"
    c.loss.aggregation = "token-mean"
    c.critic.enabled = True
    c.critic.loss = "hl_gauss"
    c.critic.num_bins = 51  # m (ours)
    c.critic.v_min = 0.0  # support of the value (ours: the 0/1 reward range)
    c.critic.v_max = 1.0
    c.critic.sigma_ratio = 0.75  # σ / bin width
    c.critic.lr = 3e-4
    c.critic.value_clip = 0.2
    c.critic.warmup_steps = 5
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.critic.lr = 1e-5  # ours
    return c
