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

`only_cliffs` (the paper's setting: guidance where the model gets no correct
rollout, its "learning cliff"): every row is first sampled on the plain prompt;
in each group with a reference solution and no correct row (`cliff_B`), the
first ⌈fraction·n⌉ rows are sampled again on the guided prompt and replace
those rows; the replaced rows were generated too and are reported off the batch
(`Groups.off_batch`), so the budget counts them. On cliff groups the unguided
pass rate is 0, so `rollout/guided_pass_rate` > 0 is guidance that helped.
Single process only (whether a process re-samples depends on its own groups, and
the sampler's calls are collectives). `answer_free` caps the prefix at k − 1 of
the solution's k lines (the last line, which states the answer, is never shown).
"""

from __future__ import annotations

import dataclasses
import math
import string

import jax
import numpy as np

from rlvr_jax.registry import in_range
from rlvr_jax.rollout.base import ROLLOUTS, Request, RolloutContext, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.rollout.plain import plain_prompts, sample_rows
from rlvr_jax.tokenizers import encode_prompt

FIELDS = ("prompt", "hint", "solution", "solution_prefix")


def solution_prefix(solution: str, frac: float, answer_free: bool = False) -> str:
    """The first ⌈frac·k⌉ of the k lines of `solution` (at most k − 1 if `answer_free`)."""
    lines = solution.splitlines()
    n = math.ceil(frac * len(lines))
    return "\n".join(lines[: min(n, len(lines) - 1) if answer_free else n])


def guided_text(template: str, problem, task, prefix_frac: float, answer_free=False) -> str:
    """`template` rendered for `problem` (ValueError naming the option on a bad field)."""
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    if used - set(FIELDS):
        raise ValueError(
            f"config.rollout.guided.template = {template!r} uses {sorted(used - set(FIELDS))}; "
            f"valid fields: {FIELDS}"
        )
    fields = dict(prompt=problem.prompt, solution=problem.solution)
    fields["solution_prefix"] = solution_prefix(problem.solution, prefix_frac, answer_free)
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
    only_cliffs=False,
    answer_free=False,
)
def guided(ctx: RolloutContext, *, fraction, template, prefix_frac, only_cliffs, answer_free):
    """Guided rows sampled on `template`, laid out on the unguided prompt with their μ."""
    req = ctx.request
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'guided' cannot continue prefixes (PAIR)")
    first = np.concatenate([np.arange(n) < math.ceil(fraction * n) for n in req.counts])
    texts = [guided_text(template, p, ctx.task, prefix_frac, answer_free) for p in req.problems]
    guided_prompts = [encode_prompt(ctx.tokenizer, t) for t in texts]
    plain = plain_prompts(ctx)
    if only_cliffs:
        if jax.process_count() > 1:
            raise ValueError("config.rollout.guided.only_cliffs runs in a single process only")
        return _guide_cliffs(ctx, first, guided_prompts, plain)
    prompts = [guided_prompts[g] if first[r] else plain[r] for r, g in enumerate(req.group_R)]
    groups = scored_groups(ctx, sample_rows(ctx, prompts), info={"guided_B": first})
    return groups.with_prompts(first, plain)


def _guide_cliffs(ctx: RolloutContext, first, guided_prompts, plain) -> Groups:
    """Plain rows; the first rows of each all-fail group re-sampled guided in their place."""
    req = ctx.request
    groups = scored_groups(ctx, sample_rows(ctx, plain))
    cliff = np.array(
        [
            bool(p.solution) and not groups.correct[groups.group == g].any()
            for g, p in enumerate(req.problems)
        ]
    )
    is_guided = first & cliff[req.group_R]
    if is_guided.any():
        rows = np.flatnonzero(is_guided)
        sub_req = Request([req.problems[g] for g in req.group_R[rows]], np.ones(len(rows), int))
        sub = dataclasses.replace(ctx, request=sub_req, key=jax.random.fold_in(ctx.key, 1))
        redo = scored_groups(sub, sample_rows(sub, [guided_prompts[g] for g in req.group_R[rows]]))
        redo = redo.with_prompts(np.ones(len(rows), bool), [plain[r] for r in rows])
        replaced = groups.lengths[rows]
        # Off the batch: the plain rows the guided ones replaced.
        groups = groups.replace_rows(
            zip(rows, range(len(rows)), strict=True), redo, (len(rows), int(replaced.sum()))
        )
    groups.info = {"guided_B": is_guided, "cliff_B": cliff[groups.group]}
    return groups
