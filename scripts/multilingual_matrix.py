"""Train one GRPO model per training language and evaluate each on every language.

Usage:
  python scripts/multilingual_matrix.py --out runs/multilingual \
      [--train en,es,fr,de] [--eval en,es,fr,de] [--num-problems 64] [--n-samples 8] \
      [--config experiments/multilingual/multilingual.py] [--png docs/multilingual_matrix.png]
      [--merges iso,task_vectors] [--set score.language.language=en]

Each training run is experiments/multilingual/multilingual.py:<lang> in
<out>/train_<lang> (resumed / reused); the matrix (pass@1 and language
consistency, base row first) goes to <out>/matrix.json, matrix.md and the heat map.
--merges adds rows of the trained models merged with λ = 1/K: ISO-Merger ("iso",
the base spectra kept) and task arithmetic ("task_vectors").
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from rlvr_jax import pyfile
from rlvr_jax.analysis.multilingual import heatmap, markdown, train_eval_matrix
from rlvr_jax.train.eval_checkpoint import parse_options


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--train", default="en,es,fr,de")
    p.add_argument("--eval", default="en,es,fr,de")
    p.add_argument("--num-problems", type=int, default=64)
    p.add_argument("--n-samples", type=int, default=8)
    p.add_argument("--config", default="experiments/multilingual/multilingual.py")
    p.add_argument("--png", default=None, help="heat map path (default <out>/matrix.png)")
    p.add_argument("--merges", default="", help="extra merged rows, e.g. iso,task_vectors")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        help="config override field=value, e.g. "
        "score.language.language=en (reward English reasoning); repeatable",
    )
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    module = pyfile.load(a.config, "experiment")
    overrides = parse_options(a.set)

    def make_config(language):
        c = module.get_config(language)
        for field, value in overrides.items():
            *parents, leaf = field.split(".")
            node = c
            for part in parents:
                node = node[part]
            node[leaf] = value
        return c

    result = train_eval_matrix(
        make_config,
        a.train.split(","),
        a.eval.split(","),
        a.out,
        num_problems=a.num_problems,
        n_samples=a.n_samples,
        merges=[m for m in a.merges.split(",") if m],
    )
    text = markdown(result)
    (Path(a.out) / "matrix.md").write_text(text)
    heatmap(result, a.png or Path(a.out) / "matrix.png")
    print(text, "\ntraining CPU seconds:", result["cpu_seconds"])


if __name__ == "__main__":
    main()
