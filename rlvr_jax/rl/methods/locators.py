"""Cliff's first-mistake locators: the score signal "first_mistake" (first_mistake_B).

  exact   the task's step verifier (`task.first_wrong_step`), an oracle
  noisy   the exact one with a configurable error rate (a weak teacher)
  judge   Cliff's LLM judge: a model prompted to name the first wrong line
          (`rlvr_jax.train.judge`), parsed robustly; the paper's locator

Indices count the row's response tokens (`core.cliff`'s convention); −1 means
nothing located. Rows are decoded once per step (`task_signals.step_rows`).
"""

from __future__ import annotations

import zlib

import jax
import numpy as np

from rlvr_jax.core.cliff import first_mistake_index
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods.task_signals import first_mistake_indices, step_locator, step_rows
from rlvr_jax.sampling import Sampler

LOCATORS = ("exact", "noisy", "judge")


def noisy_first_mistakes(first_B, lengths_B, error_rate: float, rng) -> np.ndarray:
    """The exact locator with errors: each located index moves, with probability `error_rate`,
    to a uniformly drawn other response token of its row (0..length; length = the stop token).

    Args:
      first_B: [B] int exact first mistakes (−1 = none; left alone).
      lengths_B: [B] int text tokens per row (so the stop token is index lengths_B[i]).
      error_rate: probability of a wrong location, in [0, 1].
      rng: a NumPy Generator.
    Returns:
      [B] int32 indices; rows whose row has a single position keep it.
    """
    out = np.asarray(first_B, np.int32).copy()
    for i in np.flatnonzero(out >= 0):
        n = int(lengths_B[i]) + 1  # positions 0..length
        if n > 1 and rng.random() < error_rate:
            k = int(rng.integers(n - 1))
            out[i] = k + (k >= out[i])  # uniform over the other positions
    return out


def judge_first_mistakes(ctx, rows, wrong_R, *, domain, role, max_new_tokens) -> np.ndarray:
    """Cliff's LLM judge: each wrong row's first wrong line named by a judge model, as an index.

    The judge (`train.judge`, the warm start `domain`/`role`, "" = the run's
    model.domain) reads the problem and the decoded response; "Line n" maps to
    the first token of the response's n-th line (past the last line: the stop
    token), "None" and unparsable answers to −1. Logs the judge's unparsed
    share and, where the task has an exact locator, its agreement with it and
    where it errs (`locator_errors`: first_mistake/judge_early, _exact, _late,
    _missed, _spurious), so a page can tell "Cliff's rule" from "this judge".
    """
    from rlvr_jax.train import judge, warmstart  # lazy: pulls in training code

    domain = domain or ctx.domain
    key = ("judge", domain, role)
    if key not in ctx.cache:
        ws = warmstart.load_warm_start(domain, role)
        pad = ws.tokenizer.pad_id if ws.tokenizer.pad_id is not None else 0
        ctx.cache[key] = (Sampler(ws.model, pad_id=pad), ws.tokenizer)
    sampler, tokenizer = ctx.cache[key]
    idx = [i for i, r in enumerate(rows) if r is not None and wrong_R[i]]
    out = np.full(len(rows), -1, np.int32)
    if not idx:
        return out
    lines, _ = judge.judge_lines(
        sampler,
        tokenizer,
        [rows[i].problem for i in idx],
        [rows[i].text for i in idx],
        jax.random.PRNGKey(0),
        max_new_tokens=max_new_tokens,
    )
    for i, line in zip(idx, lines, strict=True):
        if line not in (None, judge.NO_MISTAKE):
            start = judge.line_start(rows[i].text, line)
            out[i] = first_mistake_index((start, start), rows[i].offsets)
    unparsed = float(np.mean([x is None for x in lines]))
    ctx.metrics["first_mistake/judge_unparsed"] = unparsed
    locate = step_locator(ctx.task)
    if locate is not None:  # diagnostics only: the judge against the exact locator
        exact = first_mistake_indices(locate, rows, wrong_R)
        ctx.metrics["first_mistake/judge_agree_exact"] = float(np.mean(out[idx] == exact[idx]))
        for name, share in locator_errors(out[idx], exact[idx]).items():
            ctx.metrics[f"first_mistake/judge_{name}"] = share
    return out


def locator_errors(got_R, exact_R) -> dict[str, float]:
    """Where a locator put each wrong row's first mistake, relative to the exact one.

    Shares of the rows (summing to 1): "early" (before the exact mistake), "exact",
    "late" (after it), "missed" (nothing located where the exact locator finds one),
    "spurious" (a location where it finds none). Indices as `first_mistake_B`'s
    (−1 = nothing located).
    """
    got, exact = np.asarray(got_R), np.asarray(exact_R)
    n = max(len(got), 1)
    both = (got >= 0) & (exact >= 0)
    counts = {
        "early": both & (got < exact),
        "exact": got == exact,
        "late": both & (got > exact),
        "missed": (got < 0) & (exact >= 0),
        "spurious": (got >= 0) & (exact < 0),
    }
    return {k: float(v.sum() / n) for k, v in counts.items()}


@signals.register(
    "first_mistake",
    provides=("first_mistake_B",),
    locator="exact",
    error_rate=0.0,
    noise_seed=0,
    judge_domain="",
    judge_role="judge",
    judge_max_new_tokens=8,
)
def first_mistake(
    ctx,
    groups,
    batch,
    *,
    locator,
    error_rate,
    noise_seed,
    judge_domain,
    judge_role,
    judge_max_new_tokens,
):
    """Cliff's locator: the first mistaken response token of each wrong row (−1 elsewhere).

    Locators (`locator`):
      "exact": the task's step verifier (`task.first_wrong_step(problem,
        text).char_span`, mapped by `core.cliff.first_mistake_index`); the
        number of text tokens (the stop token) for a missing step or answer.
      "noisy": the exact one, each located index moved with probability
        `error_rate` to another token of the row (`noisy_first_mistakes`;
        seeded by `noise_seed` and the step's rows): a weak teacher.
      "judge": Cliff's LLM judge (`judge_first_mistakes`), a model prompted to
        name the first wrong line; the paper's locator.
    −1 for correct and invalid rows and when the locator finds no mistake.
    Logs "first_mistake/located_frac" (located / wrong rows).

    Raises:
      ValueError: an unknown locator, or "exact" / "noisy" on a task without a
        step verifier.
    """
    if locator not in LOCATORS:
        raise ValueError(
            f"config.score.first_mistake.locator = {locator!r}; valid: {', '.join(LOCATORS)}"
        )
    task = ctx.task
    wrong = ~np.asarray(batch["correct_B"], bool)
    rows = step_rows(ctx, groups)
    if locator == "judge":
        out = judge_first_mistakes(
            ctx,
            rows,
            wrong,
            domain=judge_domain,
            role=judge_role,
            max_new_tokens=judge_max_new_tokens,
        )
    else:
        locate = step_locator(task)
        if locate is None:
            raise ValueError(
                f"config.score.signals: 'first_mistake' with locator {locator!r} needs a task "
                f"with a step verifier (arithmetic, multilingual_arithmetic); task "
                f"{task.name!r} has none (locator 'judge' needs none)"
            )
        out = first_mistake_indices(locate, rows, wrong)
        if locator == "noisy":
            if not 0.0 <= error_rate <= 1.0:
                raise ValueError(
                    f"config.score.first_mistake.error_rate = {error_rate!r}; must be in [0, 1]"
                )
            lengths = np.array([0 if r is None else len(r.ids) for r in rows])
            # Seeded by the option and the step's rows: reproducible, and new every step.
            rows_crc = zlib.crc32(np.ascontiguousarray(batch["tokens_BxT"]).tobytes())
            rng = np.random.default_rng([noise_seed, rows_crc, 0xC11F])
            noisy = noisy_first_mistakes(out, lengths, error_rate, rng)
            ctx.metrics["first_mistake/moved_frac"] = float(
                np.mean(noisy[out >= 0] != out[out >= 0]) if (out >= 0).any() else 0.0
            )
            out = noisy
    n_wrong = int((wrong & np.array([r is not None for r in rows])).sum())
    ctx.metrics["first_mistake/located_frac"] = float((out >= 0).sum() / max(n_wrong, 1))
    return {"first_mistake_B": out}
