"""Cliff's LLM judge: a model prompted to name the first wrong line of a solution.

Cliff asks an off-the-shelf LLM to find the first mistake of each wrong
rollout. There is no model hub here, and a sub-million-parameter model does
not follow instructions it was never trained on, so the judge is a warm start
(`warmstart_specs`, role "judge") trained by SFT on this prompt:

  {problem prompt}
  Candidate solution:
  {the response}
  Which line is the first wrong one? Answer "Line <n>" or "None".

with target "Line <n>" (1-based line of the response) or "None". The training
candidates are the task's reference solutions (target "None") and corrupted
ones (`privileged.corrupt_solution`: one integer changed; or the last lines
dropped), labelled by the task's exact step locator (`first_wrong_step`), so
the judge imitates that locator on text it reads. At RL time it sees the
policy's own wrong rollouts and its answer is parsed robustly
(`parse_judgement`: never executed; anything unparsable locates nothing).

Ours: the prompt wording, the answer format, the corruption mix (1/3
reference, 1/2 one changed integer, 1/6 truncated) and that the judge is
trained on the task rather than prompted zero-shot.
"""

from __future__ import annotations

import re

import jax
import numpy as np

from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import Problem
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt
from rlvr_jax.train import privileged

JUDGE_VIEW = (
    "{prompt}\nCandidate solution:\n{response}\n"
    'Which line is the first wrong one? Answer "Line <n>" or "None".'
)
NO_MISTAKE = 0  # parse_judgement's line for "None"
_LINE_RE = re.compile(r"\bline\s*[:#]?\s*([0-9]{1,4})\b", re.IGNORECASE)
_NONE_RE = re.compile(r"\bnone\b", re.IGNORECASE)


def judge_prompt(problem: Problem, response: str) -> str:
    """The judge's prompt text for a candidate response."""
    return privileged.render_view(JUDGE_VIEW, problem, response)


def line_start(text: str, line: int) -> int:
    """Character offset where 1-based `line` starts; len(text) past the last line."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts[line - 1] if 1 <= line <= len(starts) else len(text)


def exact_label(locate, problem: Problem, text: str) -> int:
    """The exact locator's answer as a line number (NO_MISTAKE when the text is right).

    A mistake at the end of the text (a missing step or answer) is the line after the last.
    """
    check = locate(problem, text)
    if check.index is None:
        return NO_MISTAKE
    start = check.char_span[0]
    after_last = start >= len(text) and text and not text.endswith("\n")
    return text[:start].count("\n") + 1 + int(bool(after_last))


def judge_target(line: int) -> str:
    return "None" if line == NO_MISTAKE else f"Line {line}"


def parse_judgement(text: str) -> int | None:
    """The line a judge named: "Line <n>" -> n, "None" -> NO_MISTAKE, anything else None.

    The first "line <n>" (any case, optional ":" / "#") wins; "none" counts only
    without one. Bounded regexes on at most 200 characters; never executed.
    """
    text = text[:200] if isinstance(text, str) else ""
    m = _LINE_RE.search(text)
    if m:
        n = int(m.group(1))
        return n if n >= 1 else None
    return NO_MISTAKE if _NONE_RE.search(text) else None


def candidate(problem: Problem, rng: np.random.Generator) -> str:
    """A training candidate: the reference, one integer changed, or the last lines dropped."""
    u = rng.random()
    if u < 1 / 3:
        return problem.solution
    if u < 5 / 6:
        return privileged.corrupt_solution(problem.solution, rng) or problem.solution
    lines = problem.solution.split("\n")
    keep = int(rng.integers(1, len(lines))) if len(lines) > 1 else 1
    return "\n".join(lines[:keep])


def judge_examples(task, problems: list[Problem], *, seed: int) -> list[tuple[str, str]]:
    """(judge prompt, "Line <n>" / "None") SFT pairs, labelled by `task.first_wrong_step`."""
    locate = task.first_wrong_step
    rng = np.random.default_rng([seed, 0x1D6E])
    out = []
    for p in problems:
        text = candidate(p, rng)
        out.append((judge_prompt(p, text), judge_target(exact_label(locate, p, text))))
    return out


def judge_lines(sampler, tokenizer, problems, texts, key, *, max_new_tokens=8, chunk=64):
    """Greedy judgements of each (problem, response text): (parsed lines, raw answers).

    Args:
      sampler: a `Sampler` over the judge model.
      tokenizer: the judge's tokenizer.
      problems, texts: the problems and the candidate responses (equal length).
      key: PRNG key (greedy decoding does not use it; the sampler wants one).
      max_new_tokens: the judge's answer budget.
      chunk: prompts per sampler call.
    Returns:
      (lines, raw): `parse_judgement` of each answer (None = unparsable) and the
      answers' text.
    """
    params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new_tokens, stop_token_ids=tokenizer.stop_ids, n=1
    )
    raw: list[str] = []
    for lo in range(0, len(texts), chunk):
        prompts = [
            encode_prompt(tokenizer, judge_prompt(p, t))
            for p, t in zip(problems[lo : lo + chunk], texts[lo : lo + chunk], strict=True)
        ]
        ro = sampler.sample(prompts, params, jax.random.fold_in(key, lo))
        for b in range(len(prompts)):
            raw.append(tokenizer.decode(cut_at_stop(ro.sampled_tokens(b), tokenizer.stop_ids)))
    return [parse_judgement(r) for r in raw], raw


def evaluate_judge(model, tokenizer, task, *, num_problems=256, seed=0) -> dict:
    """The judge against the exact locator on held-out (test split) training-style candidates.

    Returns:
      {"accuracy": exact line match over all candidates, "accuracy_wrong" / "accuracy_right"
      over the wrong / correct ones, "unparsed": share of unparsable answers,
      "num_candidates"}.
    """
    problems = task.problems(num_problems, "test")
    rng = np.random.default_rng([seed, 0xE7A1])
    texts = [candidate(p, rng) for p in problems]
    locate = task.first_wrong_step
    want = np.array([exact_label(locate, p, t) for p, t in zip(problems, texts, strict=True)])
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model, pad_id=pad)
    got, _ = judge_lines(sampler, tokenizer, problems, texts, jax.random.PRNGKey(seed))
    unparsed = np.array([g is None for g in got])
    hit = np.array([g == w for g, w in zip(got, want, strict=True)])
    wrong = want != NO_MISTAKE
    return {
        "accuracy": float(hit.mean()),
        "accuracy_wrong": float(hit[wrong].mean()) if wrong.any() else 0.0,
        "accuracy_right": float(hit[~wrong].mean()) if (~wrong).any() else 0.0,
        "unparsed": float(unparsed.mean()),
        "num_candidates": len(texts),
    }
