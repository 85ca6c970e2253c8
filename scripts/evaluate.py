"""Evaluate a saved policy on a verifiable task: held-out pass@1, pass@n and avg@n.

Usage:
  python scripts/evaluate.py runs/grpo    # a run workdir: its task and settings by default
  python scripts/evaluate.py runs/grpo --task countdown \
      --option num_numbers=3 --option max_number=10 --option target_max=30
  python scripts/evaluate.py ~/.cache/rlvr_jax/warmstart/countdown-base-<hash> --task countdown \
      --num-problems 256 --n-samples 8 --output eval.json

MODEL is a Hugging Face-format directory (config.json, model.safetensors, tokenizer
file) or a run workdir, whose export/ holds the final policy. A run workdir is
evaluated with the run's own task, options, dtypes and evaluation settings (problems,
samples, temperature, max new tokens = rollout.max_new_tokens, seed = the run's seed
+ 1), so the numbers equal the "after" row of its results.md; each flag given
changes that one setting (--task evaluates on another task, with only the
--option given). Another directory uses split test, 128 problems x 8
samples, temperature 1, 64 new tokens, seed 0. The settings and the weights'
digest are printed under the table and written into --output. Task options are
JSON literals (3, 0.5, true, "x") or bare strings (+-).
"""

from __future__ import annotations

import argparse
import json
import sys

from rlvr_jax.train.eval_checkpoint import (
    EVAL_DEFAULTS,
    evaluate_model_dir,
    evaluate_run,
    markdown_summary,
    parse_options,
    run_task,
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="model directory or run workdir")
    ap.add_argument("--task", help="task name (default: the task a run workdir trained on)")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="task option, repeatable",
    )
    default = " (default: the run's; else %s)"
    ap.add_argument("--split", help="problem split" + default % EVAL_DEFAULTS["split"])
    for name, kind in (("num_problems", int), ("n_samples", int), ("temperature", float),
                       ("max_new_tokens", int), ("seed", int)):  # fmt: skip
        flag = "--" + name.replace("_", "-")
        ap.add_argument(flag, type=kind, dest=name, help=default % EVAL_DEFAULTS[name])
    ap.add_argument("--output", help="also write the full result as JSON to this file")
    args = ap.parse_args()
    settings = {k: getattr(args, k) for k in EVAL_DEFAULTS}
    try:
        options = parse_options(args.option)
        if run_task(args.model) is not None:  # a run: its own task, settings and dtypes
            result = evaluate_run(args.model, task_name=args.task, task_options=options, **settings)
        elif args.task is None:
            sys.exit(f"error: {args.model} is not a run workdir; give --task")
        else:
            chosen = {k: (EVAL_DEFAULTS[k] if v is None else v) for k, v in settings.items()}
            result = evaluate_model_dir(args.model, args.task, task_options=options, **chosen)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(f"model: {result['model_dir']}\n")
    print(markdown_summary(result))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
