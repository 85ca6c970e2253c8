"""OC-GRPO's rollout (`rollout.name = "guided"`): guided rows, trained on the unguided prompt.

Paper-fixed (abstract): rollouts are generated from the training prompt with
privileged guidance (e.g. a solution prefix) in it, while the objective is the
original prompt's; an importance-corrected, truncated objective steers the
update back to it (the "oc_grpo" loss: w = clip(π_old(y_t|x) / μ(y_t|x, guide))).

Here, the first ⌈fraction·n⌉ rows of each group of n are sampled on the guided
prompt `template` (fields {prompt}, {hint} (`task.hint`), {solution},
{solution_prefix}: the first ⌈prefix_frac·k⌉ of the reference solution's k
lines); the others on the plain prompt. Each guided row is then laid out with
the unguided prompt in front of its response (`Groups.with_prompts`), keeping
μ = the log-probs it was sampled with (`behaviour_logps`), so the trainer's
π_old and the loss see x without the guidance (`loss.recompute_old_logps =
True`, which `validate` requires). Ours: fraction ½, the template wording,
prefix ½. Rows report `guided_B`; the loss logs the weights on guided tokens
(`iw_mean@guided`, `iw_clip_frac@guided`), the trainer their reward and pass
rate against the unguided rows (`rollout/guided*`).
"""

from __future__ import annotations

import math
import string

import numpy as np

from rlvr_jax.registry import in_range
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.rollout.plain import plain_prompts, sample_rows
from rlvr_jax.tokenizers import encode_prompt

FIELDS = ("prompt", "hint", "solution", "solution_prefix")


def solution_prefix(solution: str, frac: float) -> str:
    """The first ⌈frac·k⌉ of the k lines of `solution`."""
    lines = solution.splitlines()
    return "\n".join(lines[: math.ceil(frac * len(lines))])


def guided_text(template: str, problem, task, prefix_frac: float) -> str:
    """`template` rendered for `problem` (ValueError naming the option on a bad field)."""
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    if used - set(FIELDS):
        raise ValueError(
            f"config.rollout.guided.template = {template!r} uses {sorted(used - set(FIELDS))}; "
            f"valid fields: {FIELDS}"
        )
    fields = dict(prompt=problem.prompt, solution=problem.solution)
    fields["solution_prefix"] = solution_prefix(problem.solution, prefix_frac)
    if "hint" in used:
        if not hasattr(task, "hint"):  # the privileged-context interface of a task
            raise ValueError(
                f"config.rollout.guided.template uses {{hint}}, but task {task.name!r} has no "
                "hint(problem); tasks with one: arithmetic, multilingual_arithmetic"
            )
        fields["hint"] = task.hint(problem)
    return template.format(**fields)


def _check(c) -> None:
    in_range("rollout.guided", c.rollout.guided, "fraction", 0.0, 1.0, lo_open=True)
    in_range("rollout.guided", c.rollout.guided, "prefix_frac", 0.0, 1.0)


# μ (the guided context) differs from π_old on the guided rows: the trainer scores π_old.
@ROLLOUTS.register(
    "guided",
    check=_check,
    off_policy=True,
    fraction=0.5,
    template="{prompt}\nThe solution begins:\n{solution_prefix}",
    prefix_frac=0.5,
)
def guided(ctx: RolloutContext, *, fraction, template, prefix_frac) -> Groups:
    """Guided rows sampled on `template`, laid out on the unguided prompt with their μ."""
    req = ctx.request
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'guided' cannot continue prefixes (PAIR)")
    is_guided = np.concatenate([np.arange(n) < math.ceil(fraction * n) for n in req.counts])
    texts = [guided_text(template, p, ctx.task, prefix_frac) for p in req.problems]
    guided_prompts = [encode_prompt(ctx.tokenizer, t) for t in texts]
    plain = plain_prompts(ctx)
    prompts = [guided_prompts[g] if is_guided[r] else plain[r] for r, g in enumerate(req.group_R)]
    groups = scored_groups(ctx, sample_rows(ctx, prompts), info={"guided_B": is_guided})
    return groups.with_prompts(is_guided, plain)
