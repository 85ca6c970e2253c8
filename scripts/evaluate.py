"""Evaluate a saved policy on a verifiable task: held-out pass@1, pass@n and avg@n.

Usage:
  python scripts/evaluate.py runs/grpo    # a run workdir: its task and options by default
  python scripts/evaluate.py runs/grpo --task countdown \
      --option num_numbers=3 --option max_number=10 --option target_max=30
  python scripts/evaluate.py ~/.cache/rlvr_jax/warmstart/countdown-base-<hash> --task countdown \
      --num-problems 256 --n-samples 8 --output eval.json

MODEL is a Hugging Face-format directory (config.json, model.safetensors, tokenizer
file) or a run workdir, whose export/ holds the final policy. Task options are
JSON literals (3, 0.5, true, "x") or bare strings (+-).
"""

from __future__ import annotations

import argparse
import json
import sys

from rlvr_jax.train.eval_checkpoint import (
    evaluate_model_dir,
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
    ap.add_argument("--split", default="test")
    ap.add_argument("--num-problems", type=int, default=128)
    ap.add_argument("--n-samples", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", help="also write the full result as JSON to this file")
    args = ap.parse_args()  # fmt: skip
    try:
        task, options = args.task, {}
        if task is None:
            trained = run_task(args.model)
            if trained is None:
                sys.exit(f"error: {args.model} is not a run workdir; give --task")
            task, options = trained
        options.update(parse_options(args.option))
        result = evaluate_model_dir(
            args.model,
            task,
            task_options=options,
            split=args.split,
            num_problems=args.num_problems,
            n_samples=args.n_samples,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(f"model: {result['model_dir']}\n")
    print(markdown_summary(result))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
