"""Cliff ("Learning Process Rewards from the First Mistake") on the warm-start arithmetic base.

Reproduces, in miniature, Cliff against GRPO: a locator finds the first
mistaken token k of each wrong rollout; the tokens before it (a correct partial
solution) get +a·|A_i|, the tokens from it on −b·|A_i|; correct rollouts keep
the GRPO advantage A_i. The locator here is the exact step verifier of the
arithmetic task (`task.first_wrong_step`, score signal "first_mistake"), which
Countdown lacks, so this experiment runs on arithmetic by default. Compare
pass@1 with experiments/baselines/grpo.py:arithmetic.

Paper-fixed (abstract): prefix before the first mistake positive, suffix from it
negative, correct rollouts unchanged.
Ours (docs/methods.md): a = b = 1 scaled by |A_i| (credit.cliff.scale = True); a
wrong rollout whose locator finds no wrong step keeps A_i; the stop token takes
the negative credit for a missing step / answer. GRPO advantages, token PPO clip
ε = 0.2, G = 8, no KL (grpo.py's choices).
Not here: the LLM-judge and noisy locators of docs/methods.md (only the exact step
verifier is a score signal).

Command: python -m rlvr_jax.main --config=experiments/cliff/cliff.py --workdir=runs/cliff
Variants: `:arithmetic` (= the default), `:pulse` (tiny random model, 2 steps, on
arithmetic). `:countdown` is refused: Countdown has no step verifier.
Runtime: not measured; about grpo.py:arithmetic's (the locator is host-side string work).
"""

from rlvr_jax.rl.config import apply_variant, default_config


def get_config(variant: str = ""):
    if variant == "countdown":
        raise ValueError(
            "cliff.py:countdown: score signal 'first_mistake' needs a task with a step "
            "verifier (arithmetic, multilingual_arithmetic); Countdown has none"
        )
    c = default_config()
    c.model.domain = c.task.name = "arithmetic"  # step traces for the exact locator
    c.score.signals = "first_mistake"  # first_mistake_B from the step verifier
    c.credit.name = "grpo"
    c.credit.transforms = "cliff"
    c.credit.cliff.a = 1.0  # a: prefix magnitude (ours)
    c.credit.cliff.b = 1.0  # b: suffix magnitude (ours)
    c.credit.cliff.scale = True  # ×|A_i| (docs/methods.md); False: ±a/±b, also for all-wrong groups
    c.loss.name = "ppo_clip"
    c.data.group_size = 8  # G
    return apply_variant(c, variant)
