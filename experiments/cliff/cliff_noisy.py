"""Cliff with the noisy locator: the locator arm of experiments/cliff/cliff.py.

Everything as cliff.py (the paper's credit: prefix +a·|A_i|, suffix −b·|A_i|),
except the locator of the first mistake, which is
the exact step verifier with a 30% error rate: each located index moves,
with probability 0.3, to another token of the rollout drawn uniformly (a weak
teacher; "first_mistake/moved_frac" is logged per step).
Compare pass@1 with cliff.py (the LLM judge) and experiments/baselines/grpo.py:arithmetic.

Paper-fixed and ours: see cliff.py; this arm (the locator) is ours.

Command: python -m rlvr_jax.main --config=experiments/cliff/cliff_noisy.py --workdir=runs/cn
Variants: `:arithmetic` (= the default), `:pulse` (tiny random model, 2 steps).
Runtime: not measured; about grpo.py:arithmetic's (the locator is host-side string work).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B (ours; the abstract names
no model) on the arithmetic task, N = 2048 (ours); the shared block (ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from pathlib import Path

from rlvr_jax import pyfile

_exact = pyfile.load(Path(__file__).with_name("cliff_exact.py"), "_cliff_exact")
PAPER = _exact.PAPER


def get_config(variant: str = ""):
    if variant == "countdown":
        raise ValueError("cliff_noisy.py:countdown: Countdown has no step verifier")
    c = _exact.get_config(variant)  # the exact locator's config, variant applied
    c.score.first_mistake.locator = "noisy"
    c.score.first_mistake.error_rate = 0.3  # share of wrong locations (ours)
    return c
