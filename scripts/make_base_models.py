"""Train (or reuse from the cache) the tiny warm-start base and teacher models, and report them.

Usage:
  python scripts/make_base_models.py                        # every domain, base + teacher
  python scripts/make_base_models.py --domains countdown --roles base
  python scripts/make_base_models.py --force --cache-dir /tmp/ws   # retrain from scratch
  python scripts/make_base_models.py --domains countdown --roles privileged --ship

A model shipped in the repository (rlvr_jax/assets/warm_starts/, see
rlvr_jax/train/warmstart_shipped.py) is installed into the cache instead of trained
unless --force; --ship copies the models into those assets (commit them to make them
every machine's base).

Models go to <cache-dir>/<domain>-<role>-<hash>/ (Hugging Face files + tokenizer +
warmstart.json); see rlvr_jax/train/warmstart.py and docs/base_models.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

from rlvr_jax.tokenizers import CharTokenizer
from rlvr_jax.train import warmstart, warmstart_shipped


def _table(infos: list[dict]) -> str:
    """A Markdown table of the models' size, training time and held-out pass@k."""
    rows = [
        "| model | params | steps x batch | train s (cpu s) | pass@1 | pass@n (n) | problems "
        "| path |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for info in infos:
        spec, ev = info["spec"], info.get("eval") or {}
        n = ev.get("n_samples", 0)
        rows.append(
            f"| {spec['domain']}-{spec['role']} | {info['num_params'] / 1e6:.2f}M "
            f"| {spec['steps']} x {spec['batch_size']} | {info['train_seconds']:.0f} "
            f"({info.get('train_cpu_seconds', float('nan')):.0f}) "
            f"| {ev.get('pass@1', float('nan')):.3f} | {ev.get(f'pass@{n}', float('nan')):.3f} "
            f"({n}) | {ev.get('num_problems', 0)} | {os.path.basename(info['path'])} |"
        )
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", choices=warmstart.domains(), default=None)
    ap.add_argument("--roles", nargs="+", choices=warmstart.ROLES, default=list(warmstart.ROLES))
    ap.add_argument("--cache-dir", default=None, help="default ~/.cache/rlvr_jax/warmstart")
    ap.add_argument(
        "--tokenizer",
        choices=("auto", "char"),
        default="auto",
        help="auto: the shipped sentencepiece model if present, else char",
    )
    ap.add_argument("--force", action="store_true", help="retrain even if cached")
    ap.add_argument("--eval-problems", type=int, default=128)
    ap.add_argument("--eval-samples", type=int, default=8)
    ap.add_argument("--json", help="also write the models' info dicts to this file")
    ap.add_argument(
        "--ship", action="store_true", help="copy the models into rlvr_jax/assets/warm_starts/"
    )
    args = ap.parse_args()  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    infos = warmstart.make_base_models(
        args.domains,
        tuple(args.roles),
        tokenizer=CharTokenizer(vocab_size=128) if args.tokenizer == "char" else None,
        cache_dir=args.cache_dir,
        force=args.force,
        eval_problems=args.eval_problems,
        eval_samples=args.eval_samples,
    )
    print(_table(infos))
    for info in infos if args.ship else []:
        print("shipped:", warmstart_shipped.ship(info["path"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(infos, f, indent=2)


if __name__ == "__main__":
    main()
