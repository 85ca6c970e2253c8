"""Runs every select-stage scheduler on one base, one at a time, and prints the comparison table.

  python scripts/run_schedulers.py --steps 10 --root runs/schedulers [--pin 1]

Each run is `python -m rlvr_jax.main --config=<experiment>:<variant> --workdir=<root>/<name>
--config.seed=<seed> --config.train.steps=<steps> --config.eval.every=0` (plus the method's
overrides below); only the first run evaluates the initial policy (the "before" column is the
same base, evaluation seed and problems for every method). Finished runs (results.md present)
are reused, so the table can be rebuilt without training again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (experiment file, extra --config overrides): only the select stage differs from GRPO,
# except PAIR, whose credit (pair-weighted RLOO) is part of the method.
RUNS = {
    "grpo": ("baselines/grpo.py", []),
    "dynamic_sampling": ("baselines/grpo.py", ["--config.select.name=dynamic_sampling"]),
    "difficulty": ("difficulty/difficulty.py", []),
    "sara": ("sara/sara.py", []),
    "vigor": ("vigor/vigor.py", []),
    "pair": ("pair/pair.py", []),
    "leeps": ("leeps/leeps.py", []),
    "graph_difficulty": ("graph_difficulty/sara_graph.py", []),
}


def command(name: str, args) -> list[str]:
    """The training command of run `name` (pinned with taskset when --pin is given)."""
    path, extra = RUNS[name]
    cmd = [
        sys.executable,
        "-m",
        "rlvr_jax.main",
        f"--config=experiments/{path}:{args.variant}",
        f"--workdir={Path(args.root) / name}",
        f"--config.seed={args.seed}",
        f"--config.train.steps={args.steps}",
        "--config.eval.every=0",
        f"--config.eval.at_start={name == args.names.split(',')[0]}",
        *extra,
    ]
    return (["taskset", "-c", args.pin] if args.pin else []) + cmd


def summarize(workdir: Path, group_size: int) -> dict[str, float]:
    """Before/after pass@1 and the select-stage totals of one run's metrics.jsonl."""
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    evals = [x for x in lines if x["split"] == "eval"]
    rollouts = effective = tokens = 0.0
    for x in train:
        if "select/rollouts" in x:  # a scheduler (rlvr_jax.rl.select)
            rollouts += x["select/rollouts"]
            effective += x["select/effective_groups"]
            tokens += x["select/tokens"]
        else:  # runs logged before every select.name was a scheduler
            rollouts += x["sampled_groups"] * group_size
            effective += x["sampled_groups"] * (1 - x["zero_variance_groups"])
            tokens = float("nan")  # not logged for every sampled round
    return {
        "steps": len(train),
        "before": evals[0]["pass@1"] if evals and evals[0]["step"] == 0 else float("nan"),
        "after": evals[-1]["pass@1"],
        "pass@8_after": evals[-1]["pass@8"],
        "rollouts": rollouts,
        "eff_per_1k": 1000 * effective / max(rollouts, 1),
        "tokens": tokens,
        "rounds": sum(x.get("select/rounds", x.get("rounds", 1)) for x in train) / len(train),
        "rl_seconds": sum(x["step_seconds"] for x in train),
    }


def table(rows: dict[str, dict], before: float) -> str:
    head = (
        "| method | steps | pass@1 before | pass@1 after | Δ | pass@8 after | rollouts "
        "| effective groups / 1k rollouts | generated tokens | rounds/step | RL seconds |"
    )
    out = [head, "|" + "---|" * 11]
    for name, r in rows.items():
        tok = "–" if r["tokens"] != r["tokens"] else f"{r['tokens']:.0f}"
        out.append(
            f"| {name} | {r['steps']} | {100 * before:.1f} | {100 * r['after']:.1f} | "
            f"{100 * (r['after'] - before):+.1f} | {100 * r['pass@8_after']:.1f} | "
            f"{r['rollouts']:.0f} | {r['eff_per_1k']:.1f} | {tok} | {r['rounds']:.1f} | "
            f"{r['rl_seconds']:.0f} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--names", default=",".join(RUNS), help="comma-separated, in run order")
    p.add_argument("--variant", default="countdown")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--group-size", type=int, default=8, help="G of the experiments (for totals)")
    p.add_argument("--root", default="runs/schedulers")
    p.add_argument("--pin", default="", help="CPU list for taskset (e.g. 1); empty = no pinning")
    p.add_argument("--skip-train", action="store_true", help="only build the table")
    args = p.parse_args()
    rows = {}
    for name in args.names.split(","):
        workdir = Path(args.root) / name
        if not args.skip_train and not (workdir / "results.md").is_file():
            cmd = command(name, args)
            print(" ".join(cmd), flush=True)
            t0 = time.time()
            done = subprocess.run(cmd, cwd=ROOT)
            print(f"{name}: exit {done.returncode} after {time.time() - t0:.0f} s", flush=True)
            if done.returncode:
                continue
        if (workdir / "results.md").is_file():
            rows[name] = summarize(workdir, args.group_size)
    befores = [r["before"] for r in rows.values() if r["before"] == r["before"]]
    print(table(rows, befores[0] if befores else float("nan")))


if __name__ == "__main__":
    main()
