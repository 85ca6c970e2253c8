"""Cliff with the exact locator: the locator arm of experiments/cliff/cliff.py.

Everything as cliff.py (the paper's credit: prefix +a·|A_i|, suffix −b·|A_i|),
except the locator of the first mistake, which is
the exact step verifier of the arithmetic task (`task.first_wrong_step`): an
oracle teacher that is never wrong about the first wrong line.
Compare pass@1 with cliff.py (the LLM judge) and experiments/baselines/grpo.py:arithmetic.

Paper-fixed and ours: see cliff.py; this arm (the locator) is ours.

Command: python -m rlvr_jax.main --config=experiments/cliff/cliff_exact.py --workdir=runs/ce
Variants: `:arithmetic` (= the default), `:pulse` (tiny random model, 2 steps).
Runtime: not measured; about grpo.py:arithmetic's (the locator is host-side string work).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model) on the arithmetic task (its step traces locate the first mistake), N = 2048
(ours); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_variant, default_config

PAPER = dict(
    task=None,  # arithmetic: the exact locator needs its step traces
    max_new_tokens=2048,  # ours: arithmetic traces are short
)


def get_config(variant: str = ""):
    if variant == "countdown":
        raise ValueError("cliff_exact.py:countdown: Countdown has no step verifier")
    c = default_config()
    c.model.domain = c.task.name = "arithmetic"  # step traces for the exact locator
    c.score.signals = "first_mistake"
    c.score.first_mistake.locator = "exact"
    c.credit.name = "grpo"
    c.credit.transforms = "cliff"
    c.credit.cliff.a = 1.0
    c.credit.cliff.b = 1.0
    c.credit.cliff.scale = True
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant, paper=PAPER)
