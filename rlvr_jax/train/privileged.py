"""The self-teachers' privileged-context views, and SFT examples written in them.

The self-distillation methods (DASH, CPO, H²SD, CSCR; OPSD in general) score
the policy's own sampled tokens under a prompt that carries privileged context:
the reference solution, the response confirmed correct, or a note asserting the
answer is correct / incorrect. A warm start trained on plain prompts only has
never seen those prompts, so its "teacher" is out of distribution. A warm-start
spec with `privileged_share > 0` therefore writes that share of its SFT
examples in these views (`privileged_examples`), so the policy learns what the
context means: copy the reference, keep a confirmed solution, follow an
asserted verdict.

  name                template (fields as `rl.methods.model_signals.render_prompts`)   SFT target
  solution            "{prompt}\\nReference solution:\\n{solution}"      the reference solution
                      (DASH, CPO, H²SD's failed rows; = "{prompt}\\n{hint}" on arithmetic)
  rephrase            H²SD's success view, {response} = the reference    the reference solution
  asserted_correct    CSCR's "correct" context                           the reference solution
  asserted_incorrect  CSCR's "incorrect" context                         the reference solution with
                                                                         one integer changed
The templates are the ones the experiments and signal defaults use (imported
from here, so a view cannot drift from what the warm start was trained on).
Ours: the targets (the paper's bases saw such contexts in pretraining; here
the copy target is the simplest in-distribution behaviour) and the corruption
(`corrupt_solution`).
"""

from __future__ import annotations

import re

import numpy as np

from rlvr_jax.tasks.base import Problem

SOLUTION_VIEW = "{prompt}\nReference solution:\n{solution}"
REPHRASE_VIEW = "{prompt}\nA correct solution:\n{response}\nRephrase it in your own words."
ASSERTED_CORRECT_VIEW = "{prompt}\nNote: the answer below is correct."
ASSERTED_INCORRECT_VIEW = "{prompt}\nNote: the answer below is incorrect."
# name -> (template, target): "solution" = the reference, "corrupted" = `corrupt_solution`.
VIEWS = {
    "solution": (SOLUTION_VIEW, "solution"),
    "rephrase": (REPHRASE_VIEW, "solution"),
    "asserted_correct": (ASSERTED_CORRECT_VIEW, "solution"),
    "asserted_incorrect": (ASSERTED_INCORRECT_VIEW, "corrupted"),
}
_INT_RE = re.compile(r"[0-9]+")


def render_view(template: str, problem: Problem, response: str | None = None) -> str:
    """The view's prompt text for `problem` ({response} = `response`, default the reference)."""
    return template.format(
        prompt=problem.prompt,
        solution=problem.solution,
        response=problem.solution if response is None else response,
    )


def corrupt_solution(solution: str, rng: np.random.Generator) -> str | None:
    """The solution with one integer literal (drawn uniformly) changed by ±1..3, kept ≥ 0.

    Returns None when the text has no integer. The result always differs from
    `solution` at that literal (a wrong step result, operand or answer).
    """
    spans = [m.span() for m in _INT_RE.finditer(solution)]
    if not spans:
        return None
    s, e = spans[int(rng.integers(len(spans)))]
    value = int(solution[s:e])
    delta = int(rng.integers(1, 4))
    new = value + delta if value < delta or rng.random() < 0.5 else value - delta
    return f"{solution[:s]}{new}{solution[e:]}"


def privileged_examples(
    problems: list[Problem], *, share: float, views: tuple[str, ...], seed: int
) -> list[tuple[str, str]]:
    """(prompt, target) SFT pairs: round(share·n) problems in a privileged view, the rest plain.

    The privileged problems are a seeded random subset; their views cycle through
    `views` in that order. A problem whose view needs a corruption its solution
    does not allow (no integer) stays plain.

    Args:
      problems: the training problems, one example each.
      share: fraction of examples in a privileged view, in [0, 1].
      views: names in VIEWS (repeats weight a view).
      seed: selects the subset and the corruptions.
    Returns:
      One (prompt text, completion text) per problem, in problem order.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"privileged share {share!r}; must be in [0, 1]")
    unknown = [v for v in views if v not in VIEWS]
    if unknown or (share > 0 and not views):
        raise ValueError(f"privileged views {views!r}; valid names: {sorted(VIEWS)}")
    out = [(p.prompt, p.solution) for p in problems]
    rng = np.random.default_rng([seed, 0x5EED])
    chosen = rng.permutation(len(problems))[: round(share * len(problems))]
    for j, i in enumerate(sorted(chosen.tolist())):
        template, target = VIEWS[views[j % len(views)]]
        problem = problems[i]
        completion = problem.solution
        if target == "corrupted":
            completion = corrupt_solution(problem.solution, rng)
            if completion is None:
                continue
        out[i] = (render_view(template, problem), completion)
    return out
