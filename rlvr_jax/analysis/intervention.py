"""Entrance-prefix intervention: force each valid entrance family's prefix, measure what follows.

For every problem, `n` free samples give each entrance family F (first operand
and operator of the first step, e.g. "10 +") its *access* (share of samples
that start with F) and its natural *completion rate* (share that start with F
and are correct). Then the sampler is handed F's prefix tokens and samples `n`
continuations: their completion rate, pass@k and the solutions they reach.
"Locked at the Entrance": supplying an unselected entrance prefix lifts the
completion rate of low-access families by over an order of magnitude
(0.018 → 0.212 under PPO).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.tasks.countdown import solution_coverage, trace_family
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt
from rlvr_jax.train.evaluate import pass_at_k


def family_key(family: tuple[str, str] | None) -> str | None:
    """("10", "+") -> "10 +", the key of a problem's metadata["entrance_families"]."""
    return None if family is None else f"{family[0]} {family[1]}"


def _sample(sampler, tokenizer, task, problems, params, key, prefixes=None, batch=16):
    """Texts (forced prefix + sample, cut at stop) and verdict reasons, per problem."""
    out = []
    for lo in range(0, len(problems), batch):
        chunk = problems[lo : lo + batch]
        pre = None
        if prefixes is not None:
            pre = [p for p in prefixes[lo : lo + batch] for _ in range(params.n)]
        ro = sampler.sample(
            [encode_prompt(tokenizer, p.prompt) for p in chunk],
            params,
            jax.random.fold_in(key, lo),
            prefixes=pre,
        )
        for g, problem in enumerate(chunk):
            texts = []
            for b in range(g * params.n, (g + 1) * params.n):
                texts.append(
                    tokenizer.decode(cut_at_stop(ro.response_tokens(b), params.stop_token_ids))
                )
            reasons = [task.verify(problem, t).reason for t in texts]
            out.append((texts, reasons))
    return out


def entrance_intervention(
    model,
    tokenizer,
    task,
    problems,
    *,
    n_samples: int = 8,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    low_access: float = 0.1,
    prompts_per_batch: int = 16,
) -> dict[str, Any]:
    """Free vs entrance-forced sampling of `model` on Countdown `problems`.

    Args:
      model, tokenizer, task: the policy, its tokenizer, the Countdown task.
      problems: problems whose metadata lists their valid entrance families.
      n_samples: n, free samples per problem and forced samples per family.
      max_new_tokens, temperature, seed: sampling (the forced prefix counts
        toward the budget).
      low_access: a family is low-access when its access is below this.
      prompts_per_batch: prompts sampled together.
    Returns:
      dict: "families" (one record per (problem, family): access, natural and
      forced completion, forced pass@k for k = 1 and n, solutions reached);
      "summary" per group ("all", "low_access", "high_access": mean natural and
      forced completion rates, count); "coverage" (free samples) and
      "coverage_forced" (the union over the forced families' samples), averaged
      over problems.
    """
    params = SamplingParams(
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        stop_token_ids=tokenizer.stop_ids,
        n=n_samples,
    )
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model, pad_id=pad)
    key = jax.random.PRNGKey(seed)
    free = _sample(sampler, tokenizer, task, problems, params, key, batch=prompts_per_batch)
    pairs = [(i, f) for i, p in enumerate(problems) for f in p.metadata["entrance_families"]]
    forced = _sample(
        sampler,
        tokenizer,
        task,
        [problems[i] for i, _ in pairs],
        params,
        jax.random.fold_in(key, 1 << 20),
        prefixes=[tokenizer.encode(f) for _, f in pairs],
        batch=prompts_per_batch,
    )
    records, forced_texts = [], {}
    for (i, fam), (texts, reasons) in zip(pairs, forced, strict=True):
        free_texts, free_reasons = free[i]
        starts = [family_key(trace_family(t)) == fam for t in free_texts]
        ok = [r == CORRECT for r in reasons]
        records.append(
            {
                "problem": problems[i].id,
                "family": fam,
                "access": float(np.mean(starts)),
                "natural_completion": float(
                    np.mean([s and r == CORRECT for s, r in zip(starts, free_reasons, strict=True)])
                ),
                "forced_completion": float(np.mean(ok)),
                f"forced_pass@{n_samples}": float(pass_at_k(n_samples, sum(ok), n_samples)),
                "forced_coverage": solution_coverage(texts, problems[i]),
            }
        )
        forced_texts.setdefault(i, []).extend(texts)
    summary = {}
    groups = {
        "all": records,
        "low_access": [r for r in records if r["access"] < low_access],
        "high_access": [r for r in records if r["access"] >= low_access],
    }
    for name, rs in groups.items():
        summary[name] = {
            "count": len(rs),
            "natural_completion": float(np.mean([r["natural_completion"] for r in rs]))
            if rs
            else None,
            "forced_completion": float(np.mean([r["forced_completion"] for r in rs]))
            if rs
            else None,
        }
    cover = [solution_coverage(free[i][0], p) for i, p in enumerate(problems)]
    cover_forced = [solution_coverage(forced_texts.get(i, []), p) for i, p in enumerate(problems)]
    return {
        "families": records,
        "summary": summary,
        "low_access": low_access,
        "coverage": float(np.mean(cover)),
        "coverage_forced": float(np.mean(cover_forced)),
        "pass@1": float(np.mean([np.mean([r == CORRECT for r in rs]) for _, rs in free])),
    }
