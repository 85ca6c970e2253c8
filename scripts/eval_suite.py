"""Evaluate saved policies on a paper benchmark suite and print the paper-style table.

Usage:
  python scripts/eval_suite.py --model runs/grpo --suite math --data ~/data/benchmarks
  python scripts/eval_suite.py --model runs/grpo --model runs/gapo --suite math \
      --data ~/data/benchmarks --out eval/math --n-samples 32 --k 1,8,32 \
      --temperature 0.6 --max-new-tokens 4096
  python scripts/eval_suite.py --model runs/grpo --suite science --data DIR --num-problems 20

Suites: math (aime24 aime25 amc23 math500 minerva olympiadbench), science
(gpqa_diamond mmlu_pro), code (livecodebench humanevalplus mbppplus). DATA holds
the benchmarks' downloaded Hugging Face files (docs/eval_suites.md says which);
nothing is downloaded. --out gets results.json, table.md, pass_at_k.png and a
cache/ that a rerun with the same settings resumes from.
"""

from __future__ import annotations

import argparse
import logging
import sys

from rlvr_jax.eval import BadRow, Settings, evaluate_models


def _ks(text: str | None, n: int) -> tuple[int, ...]:
    if text is None:
        return tuple(sorted({1, n}))
    try:
        return tuple(int(k) for k in text.split(",") if k.strip())
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers, got {text!r}") from None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", action="append", required=True, help="model dir or run workdir; repeatable"
    )
    ap.add_argument("--suite", required=True, help="math, science or code")
    ap.add_argument("--data", required=True, help="directory with the benchmarks' files")
    ap.add_argument(
        "--out", help="output directory (results.json, table.md, pass_at_k.png, cache/)"
    )
    ap.add_argument("--benchmarks", default="", help="comma-separated subset of the suite")
    ap.add_argument("--n-samples", type=int, default=4)
    ap.add_argument("--k", help="comma-separated k of pass@k and maj@k, each <= n (default: 1,n)")
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=2048)
    ap.add_argument("--num-problems", type=int, help="first N problems of each benchmark")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--template", help="instruction template with {prompt} (default: the suite's)")
    ap.add_argument(
        "--no-chat-template", action="store_true", help="prompt without the chat template"
    )
    ap.add_argument("--skip-bad-rows", action="store_true", help="skip (count, log) malformed rows")
    ap.add_argument("--code-workers", type=int, default=4)
    ap.add_argument("--engine", default="paged", choices=("paged", "static"),
                    help="paged: problems batched on the paged engine; static: one call each")
    ap.add_argument("--prompts-per-batch", type=int, default=16,
                    help="problems per paged-engine call (speed and memory, not the samples)")
    ap.add_argument("--cache-gib", type=float,
                    help="the paged engine's page pool in GiB (default: every slot a whole row)")
    args = ap.parse_args()  # fmt: skip
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings(
            n_samples=args.n_samples, ks=_ks(args.k, args.n_samples),
            temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
            seed=args.seed, num_problems=args.num_problems,
            benchmarks=tuple(b for b in args.benchmarks.split(",") if b.strip()),
            template=args.template, chat_template=not args.no_chat_template,
            code_workers=args.code_workers, on_bad_row="skip" if args.skip_bad_rows else "raise",
            engine=args.engine, prompts_per_batch=args.prompts_per_batch, cache_gib=args.cache_gib,
        )  # fmt: skip
        report = evaluate_models(args.model, args.suite, args.data, settings, args.out)
    except (FileNotFoundError, ValueError, RuntimeError, BadRow) as e:
        sys.exit(f"error: {e}")
    print(report["table"])
    if args.out:
        print(f"wrote {args.out}/results.json, table.md, pass_at_k.png")


if __name__ == "__main__":
    main()
