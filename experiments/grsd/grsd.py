"""GRSD (Group-Reflective Self-Distillation) on the warm-start tool_lookup agent base.

GRSD derives guidance from the policy's own verified rollouts: the policy
reflects on each trajectory of a group, a stop-gradient snapshot contrasts the
reflections of successes and failures into group guidance, and a self-teacher
(the policy conditioned on that guidance) modulates the turn-level outcome
advantages without changing the direction the verifier set.

Paper-fixed (abstract): per-trajectory reflections by the policy on its
verified on-policy group; a stop-gradient snapshot contrasts success and
failure reflections into group-level privileged guidance; a self-teacher under
that guidance refines turn-level credit by modulating outcome advantages,
preserving their sign; agentic (multi-turn) environments.
Ours: the rollout "reflective" (`rlvr_jax.rollout.reflective`): the snapshot is
the weights that sampled the step (the rollout takes no gradient); reflections
≤ 32 tokens, guidance ≤ 48 tokens, the prompt wordings, no guidance for groups
without both a success and a failure (their GRPO advantages are 0). The score
signal "guidance" re-scores the rows of each guided group under
"{prompt}\\nGuidance: {guidance}" with the current policy; the transform "grsd"
(`rlvr_jax.core.grsd`) multiplies each turn's advantages (a turn: a maximal run of
sampled tokens) by clip(exp(λ·sign(A)·mean_turn(ℓ^T − ℓ^S)), 0.5, 2)
with λ = 1 (the abstract gives no formula). GRPO, token PPO clip, G = 8.
Logged per step: rollout/reflection_len, rollout/guidance_len, grsd/guided_rows,
grsd/shift and grsd/abs_shift (the guidance-induced log-prob shift); one group's
reflections and guidance as text in the run log.

Command: python -m rlvr_jax.main --config=experiments/grsd/grsd.py --workdir=runs/grsd
Variants: `:arithmetic` (single-turn, the arithmetic base), `:countdown` (single-turn),
`:pulse` (tiny random model on arithmetic, 2 steps).
Tested: tests/rollout/test_reflective.py builds groups with both a success and a
failure, single-turn (parity rewards) and on tool_lookup episodes (parity episode
rewards, `testing.parity_tool_episodes`), and checks that the guidance is the policy's
completion of the contrast of its own reflections (regenerated from scratch; an
episode is reflected on whole), that ℓ^T scored without guidance equals ℓ^S and with
it moves on every guided row (and only there), and that the grsd transform keeps
every advantage's sign while moving its size, with one weight per model turn that
differs between an episode's turns; the pulse (tests/rl/test_rollout_experiments.py)
asserts reflections are written, guidance shifts ℓ^T and the credit, signs kept.
Checked (not a measurement of the method): 2 steps of the default (tool_lookup warm
start) with 4 prompts x G = 8 (`--config.train.steps=2 --config.data.prompts_per_step=4
--config.eval.at_start=False --config.eval.num_problems=4 --config.eval.n_samples=2`,
taskset -c 0, 79 CPU s, wall 3m58s under load): every group had both a solved and a
failed episode (grsd/guided_rows 1.0), reflections 17-20 tokens, guidance 15-24 tokens,
mean ℓ^T − ℓ^S -0.68 and -0.60 (|shift| 0.72, 0.66). This base was fine-tuned on tool
episodes only (docs/base_models.md): its "reflections" and "guidance" are tool calls
(the run log shows them), so on it the self-teacher's signal is a prompt perturbation
rather than advice.
Runtime: three sampler calls per step (trajectories, reflections, guidance) and one
more policy forward to score.
Measured (one seed, a miniature, not a reproduction): GRSD vs GRPO
(experiments/agentic/tool_lookup.py) at an equal rollout budget, 10 steps of 16 episodes
× G = 8 on the tool_lookup base, held-out pass@1 on 64 test problems × 8 samples, the
reproduction page's runs (`python scripts/reproduce.py grsd --seeds 0`,
docs/reproductions/grsd.md; 2026-12-04, one core of this 2-core VM under load):
  arm   pass@1 before -> after   pass@8 after   turns   CPU s
  GRSD  54.3 -> 58.6             98.4           3.54    779
  GRPO  54.3 -> 59.2             100.0          3.57    349
No difference is resolved (one seed; the s.e. of a pass@1 on 512 samples is ~2 points).
Guidance reached 69-94% of the rows each step and moved the self-teacher's log-probs by
-0.52 to -0.75 nats per token on average (|shift| 0.55-0.77): it lowers nearly every
token, the prompt-perturbation effect described above, not advice. Measured in one process.

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract:
unnamed scales) on the tool_lookup episodes (the paper's multi-turn agent setting), 1024
new tokens per turn, 256-token reflections and 512-token guidance (ours); multi-host runs
(hosts without mixed groups join the guidance calls; docs/tpu_pods.md); the shared block
(ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    model="qwen3-8b",  # ours
    task=None,  # tool_lookup episodes
    max_new_tokens=1024,  # ours: per turn
)


def get_config(variant: str = ""):
    c = default_config()
    if variant in ("", "paper"):  # multi-turn tool episodes (the paper's setting)
        c.model.domain = c.task.name = "tool_lookup"
        c.rollout.max_new_tokens = 32  # per turn (the warm start's)
    c.rollout.name = "reflective"
    c.rollout.reflective.reflection_tokens = 32  # per trajectory (ours)
    c.rollout.reflective.guidance_tokens = 48  # per group (ours)
    c.rollout.reflective.log_examples = 1  # groups whose reflections/guidance are logged
    c.score.signals = "guidance"  # ℓ^T: the policy under its group's guidance
    c.credit.name = "grpo"
    c.credit.transforms = "grsd"
    c.credit.grsd.lam = 1.0  # λ (ours)
    c.credit.grsd.w_min = 0.5  # weight clip (> 0: sign kept; ours)
    c.credit.grsd.w_max = 2.0
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    apply_variant(c, variant, paper=PAPER)
    if variant == "paper":
        c.rollout.reflective.reflection_tokens = 256  # ours
        c.rollout.reflective.guidance_tokens = 512  # ours
    return c
