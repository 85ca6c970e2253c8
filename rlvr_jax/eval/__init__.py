"""Paper benchmark suites: math, science and code benchmarks from the user's downloaded files.

  from rlvr_jax.eval import Settings, evaluate_models, run_suite
  report = evaluate_models(["runs/grpo"], "math", "~/data/benchmarks", Settings(n_samples=32))
  print(report["table"])

See docs/eval_suites.md for the files and fields each benchmark reads.
"""

from rlvr_jax.eval.benchmarks import Benchmark
from rlvr_jax.eval.items import CodeTest, Item
from rlvr_jax.eval.prompts import SUITES, Suite, get_suite
from rlvr_jax.eval.rows import BadRow
from rlvr_jax.eval.runner import Settings, evaluate_models, load_suite_items, run_suite
from rlvr_jax.eval.scoring import CodeScorer

__all__ = [
    "BadRow",
    "Benchmark",
    "CodeScorer",
    "CodeTest",
    "Item",
    "SUITES",
    "Settings",
    "Suite",
    "evaluate_models",
    "get_suite",
    "load_suite_items",
    "run_suite",
]
