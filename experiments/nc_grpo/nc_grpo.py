"""NC-GRPO (Noise-Contrastive GRPO) on the warm-start Countdown base: latent-noise rollouts.

NC-GRPO diversifies each group by adding scale-calibrated Gaussian noise to
the last hidden layer of the prompt-encoding pass for half of its rollouts;
branches that still reach the answer are reinforced over those derailed by the
displacement. The objective and reward are GRPO's.

Paper-fixed (abstract): noise in the last hidden layer of the prompt encoding,
scaled to the activations, for half of each group; objective, reward and
inference protocol untouched.
Ours: the rollout "latent_noise" (`rlvr_jax.rollout.noise`): σ = 0.5 hidden-state
RMS (the abstract gives no value), the first half of each group noisy; π_old is
the clean policy's re-score of every row (rollout.latent_noise.old_logps =
"clean", our reading of "objective untouched": the trainer never sees the
noise), "noisy" keeps the sampler's log-probs instead. GRPO advantages, the
token PPO clip, G = 8, as grpo.py.
Logged per step: the noisy rows' share and their reward / pass rate against the
clean rows (rollout/noise, rollout/noise_reward, rollout/not_noise_reward, ...).

Command: python -m rlvr_jax.main --config=experiments/nc_grpo/nc_grpo.py --workdir=runs/nc_grpo
Variants: `:arithmetic`, `:pulse` (tiny random model, 2 steps).
Runtime: ~5 CPU-minutes per 20-step run here (grpo.py's ~4.5 plus one old-log-prob
forward per step). Measured against GRPO, 3 seeds (docs/reproductions/nc_grpo.md):
held-out pass@1 33.1 ± 1.7 vs 33.2 ± 2.2, pass@8 58.2 ± 2.8 vs 57.4 ± 3.1: no
difference resolved at this scale.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-7B (ours: the text backbone
of the paper's Qwen2.5-VL-7B; no vision model here), math_file instead of Geometry3K; σ
as above; the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Planned (docs/tpu_pods.md, 2026-12-04): fits a v5p chip, 25 % headroom: train step 13.0
GiB, sampler 66.0 GiB per chip in 4 calls of 2048 rows (sized from KV cache plus per-row
work; with the KV cache alone it planned 90.0 GiB, 4096 rows per call).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-7b",  # ours: the language model of the paper's Qwen2.5-VL-7B
)


def get_config(variant: str = ""):
    c = default_config()
    c.rollout.name = "latent_noise"
    c.rollout.latent_noise.sigma = 0.5  # σ in units of hidden RMS (ours)
    c.rollout.latent_noise.layer = -1  # the last block (paper)
    c.rollout.latent_noise.fraction = 0.5  # half of each group (paper)
    c.rollout.latent_noise.old_logps = "clean"  # π_old: the clean re-score (our reading)
    c.loss.recompute_old_logps = True
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = 0.2
    c.loss.ppo_clip.eps_high = 0.2
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER)
