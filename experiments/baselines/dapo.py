"""DAPO (Yu et al. 2025) on the warm-start bases: clip-higher, dynamic sampling, token-level
loss and the soft overlong penalty.

  clip-higher: ε_low = 0.2, ε_high = 0.28 (paper values).
  dynamic sampling: only groups with 0 < #correct < G by the verifier's verdict
    are kept (all-correct and all-wrong groups carry no gradient; the overlong
    penalty's shaped rewards do not count), and the missing prompts are
    resampled until B groups are kept. Ours: a cap of 10 rounds
    (select.max_rounds); a step that hits it logs select/cap_hit = 1 and
    select/short_groups, and trains on the groups it has.
  token-level policy gradient loss: Σ_{i,t} / Σ_i |o_i| ("token-mean").
  overlong reward shaping: linear penalty over the last L_cache = 16 tokens of
    the L_max = 64 budget (paper: 4k of 20k; ours scaled to our lengths).
  no KL term (β = 0), as in the paper.

Command: python -m rlvr_jax.main --config=experiments/baselines/dapo.py --workdir=runs/dapo
Variants: `:arithmetic`, `:pulse`. Runtime here: each refill round samples only
the missing prompts' groups (select/rollouts, select/rounds are logged).

Measured here (seed 0, docs/baselines.md), before dynamic sampling kept groups by
verdict and refilled only the missing prompts (reward-variance filter, 3 rounds of
B prompts each): held-out pass@1 0.255 → 0.393 after 20 steps; 387 s of RL steps
on one loaded core. Not remeasured since.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen2.5-32B, N = 20480 with L_cache
= 4096, B = 512, G = 16, lr 1e-6 after 20 warm-up steps, 16 updates per step,
ε_low/ε_high 0.2/0.28 (paper-fixed, DAPO §4.1); max_rounds and the slice are ours: 128
chips as mesh (1, 32, 4) with rules fsdp_tp (on fsdp alone the sampler's gathered 32B
weights plan 247 GiB per chip).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
Planned (docs/tpu_pods.md, 2026-12-04): fits a v5p chip, 27 % headroom: train step
38.1 GiB, sampler 65.0 GiB per chip in 16 calls of 512 rows (sized from KV cache plus
per-row work; with the KV cache alone it planned 80.8 GiB, 9 calls of 928 rows).
"""

from rlvr_jax.rl import recipes
from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen2.5-32b",  # paper: Qwen2.5-32B base
    max_new_tokens=20480,  # paper: 16384 expected + 4096 soft-overlong cache
)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    recipes.dapo(c, c.loss.ppo_clip)  # the recipe above (LSPO on DAPO shares it)
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.reward.overlong_cache = 4096  # paper: L_cache
        # ours: tensor-parallel 4 (a v5p host's chips) so the sampler's gathered 32B bf16
        # weights (61 GiB per chip on fsdp alone) fit; one micro-batch row per fsdp shard.
        c.mesh.shape, c.mesh.rules = (1, 32, 4), "fsdp_tp"
        c.train.micro_batch_size = 32
    return c
