"""Runs an RL experiment config.

  python -m rlvr_jax.main --config=experiments/baselines/grpo.py[:variant] --workdir=runs/x \
      [--config.train.steps=100 ...]

Re-running the same command resumes from the workdir's last checkpoint.
"""

from __future__ import annotations

import logging

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file (path[:variant]).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (created; resumed if it exists).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    # orbax logs every checkpoint step at INFO through absl; keep ours at INFO only.
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("rlvr_jax").setLevel(logging.INFO)
    from rlvr_jax.rl.trainer import summary_json, train

    result = train(_CONFIG.value, _WORKDIR.value)
    print(summary_json(result))


if __name__ == "__main__":
    app.run(main)
