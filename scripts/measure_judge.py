"""Cliff's LLM judge against the exact locator, on the base policy's own wrong answers.

Samples plain-prompt responses of the warm-start base on test problems, keeps
the wrong ones, and asks the judge warm start (`rlvr_jax.train.judge`, role
"judge") for the first wrong line. Reports the share of wrong responses where
the judge names the same line as the task's exact step locator, names
another line, answers "None", or answers something unparsable, plus the
judge's own evaluation on corrupted reference solutions (from warmstart.json).

Usage:
  python scripts/measure_judge.py --domain arithmetic --json runs/judge.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import jax
import numpy as np

from rlvr_jax.sampling.sampler import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt
from rlvr_jax.train import judge, warmstart


def wrong_samples(ws, task, *, problems: int, samples: int, seed: int, max_new_tokens: int):
    """(problem, text) of every wrong plain-prompt sample of the base, and the sample count."""
    tok = ws.tokenizer
    params = SamplingParams(
        temperature=1.0, max_new_tokens=max_new_tokens, stop_token_ids=tok.stop_ids, n=samples
    )
    sampler = Sampler(ws.model, pad_id=tok.pad_id if tok.pad_id is not None else 0)
    out, total = [], 0
    items = task.problems(problems, "test")
    for lo in range(0, problems, 32):
        chunk = items[lo : lo + 32]
        ro = sampler.sample(
            [encode_prompt(tok, p.prompt) for p in chunk],
            params,
            jax.random.fold_in(jax.random.PRNGKey(seed), lo),
        )
        for b, g in enumerate(ro.group):
            text = tok.decode(cut_at_stop(ro.sampled_tokens(b), tok.stop_ids))
            total += 1
            if task.verify(chunk[int(g)], text).reason != CORRECT:
                out.append((chunk[int(g)], text))
    return out, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="arithmetic")
    ap.add_argument("--problems", type=int, default=128)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", help="also write the result to this file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    base = warmstart.load_warm_start(args.domain, "base")
    jw = warmstart.load_warm_start(args.domain, "judge")
    task = warmstart.get_spec(args.domain, "base").task()
    start = time.process_time()
    wrong, total = wrong_samples(
        base,
        task,
        problems=args.problems,
        samples=args.samples,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
    )
    pad = jw.tokenizer.pad_id if jw.tokenizer.pad_id is not None else 0
    lines, raw = judge.judge_lines(
        Sampler(jw.model, pad_id=pad),
        jw.tokenizer,
        [p for p, _ in wrong],
        [t for _, t in wrong],
        jax.random.PRNGKey(0),
    )
    exact = np.array([judge.exact_label(task.first_wrong_step, p, t) for p, t in wrong])
    got = np.array([-1 if x is None else x for x in lines])
    out = {
        "base": base.path.name,
        "judge": jw.path.name,
        "samples": total,
        "wrong": len(wrong),
        "same_line": float(np.mean(got == exact)),
        "other_line": float(np.mean((got > 0) & (got != exact))),
        "none": float(np.mean(got == judge.NO_MISTAKE)),
        "unparsed": float(np.mean(got == -1)),
        "exact_line_histogram": {
            int(k): int(v) for k, v in zip(*np.unique(exact, return_counts=True), strict=True)
        },
        "judge_eval_on_corruptions": jw.info.get("eval"),
        "example": {"text": wrong[0][1], "judge": raw[0], "exact": int(exact[0])}
        if wrong
        else None,
        "cpu_seconds": round(time.process_time() - start, 1),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
