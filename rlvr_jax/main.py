"""Runs an RL experiment config.

  python -m rlvr_jax.main --config=experiments/baselines/grpo.py[:variant] --workdir=runs/x \
      [--config.train.steps=100 ...] [--allow_config_change=optimizer.lr]

Re-running the same command resumes from the workdir's last checkpoint; a second
live run on the same workdir is refused (the workdir lock names its holder). A
resume may change only the run-length and output fields unless
`--allow_config_change` names the others (e.g. a lower learning rate after a
divergence). Exit status: 0 when the run finished, 75 (EX_TEMPFAIL) when SIGTERM
stopped it after saving a checkpoint (requeue it: the same command resumes), 1 on
an error. Multi-host: run the same command in every process, adding
`--distributed` on a Cloud TPU pod (or SLURM / Open MPI), or
`--coordinator_address=host:port --num_processes=N --process_id=i` elsewhere (or
the RLVR_* environment variables of `rlvr_jax.distributed`); see docs/tpu_pods.md.
"""

from __future__ import annotations

import logging
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file (path[:variant]).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (created; resumed if it exists).")
_ALLOW = flags.DEFINE_list(
    "allow_config_change",
    [],
    "Config fields (or sections) a resumed run may change, e.g. optimizer.lr.",
)
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "jax.distributed.initialize() with cluster auto-detection (TPU pods)."
)
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in a multi-host run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
flags.mark_flags_as_required(["config", "workdir"])
flags.register_validator(
    "workdir",
    lambda v: v is None or bool(v.strip()),
    "--workdir is empty: give the run its own directory, e.g. --workdir=runs/my_run",
)


def main(argv):
    del argv
    # The imports are here, not at the top: the flags (--help included) parse without
    # loading JAX and the models, and the hosts join before the trainer is imported.
    from rlvr_jax import distributed
    from rlvr_jax.run.run_io import EXIT_PREEMPTED

    # Before anything touches a device: every host must join first.
    distributed.initialize(
        _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, auto=_DISTRIBUTED.value
    )
    # orbax logs every checkpoint step at INFO through absl; keep ours at INFO only,
    # and only on the process that logs (the others report warnings and errors).
    absl_logging.set_verbosity(absl_logging.WARNING)
    level = logging.INFO if distributed.is_logging_process() else logging.WARNING
    logging.getLogger("rlvr_jax").setLevel(level)
    from rlvr_jax.pipeline.config import is_pipeline
    from rlvr_jax.rl.trainer import summary_json, train

    if is_pipeline(_CONFIG.value):  # a multi-stage pipeline (rlvr_jax.pipeline)
        from rlvr_jax.pipeline.run import run as train
    result = train(_CONFIG.value, _WORKDIR.value, allow_config_change=_ALLOW.value)
    if distributed.is_logging_process():
        print(summary_json(result))
    if result.get("preempted"):
        sys.exit(EXIT_PREEMPTED)


if __name__ == "__main__":
    app.run(main)
