"""Runs an RL experiment config.

  python -m rlvr_jax.main --config=experiments/baselines/grpo.py[:variant] --workdir=runs/x
      [--config.train.steps=100 ...] [--allow_config_change=optimizer.lr]

Config: `--config=FILE.py:VARIANT` picks an experiment file and one of its variants
(e.g. `experiments/baselines/grpo.py:pulse`, a 2-step run of a tiny model; each
experiment's docstring lists its variants); `--config.SECTION.FIELD=VALUE`
overrides one field. Every field is documented where it is defined, in
rlvr_jax/rl/config.py (what each stage's registry names choose: docs/design.md and
docs/methods.md). A mistyped field or an invalid value is one line on stderr and exit
status 2 (`--debug` shows the traceback).

Re-running the same command resumes from the workdir's last checkpoint; a second
live run on the same workdir is refused (the workdir lock names its holder). A
resume may change only the run-length and output fields unless
`--allow_config_change` names the others (e.g. a lower learning rate after a
divergence). A finished run (same config, last checkpoint at train.steps, outputs
written) is not run again: the command says "already finished at step N" and
prints its summary; `--rerun` evaluates its final policy again and rewrites its
outputs. Every run ends with a summary on stderr (pass@k before -> after, where
results.md, curves.png, metrics.jsonl, tensorboard/ and export/ are) and its final
evaluation as JSON on stdout. Exit status: 0 when the run finished, 75
(EX_TEMPFAIL) when SIGTERM stopped it after saving a checkpoint (requeue it: the
same command resumes), 2 on a config error, 1 on another error. Multi-host: run the
same command in every process, adding `--distributed` on a Cloud TPU pod (or SLURM /
Open MPI), or `--coordinator_address=host:port --num_processes=N --process_id=i`
elsewhere (or the RLVR_* environment variables of `rlvr_jax.distributed`); see
docs/tpu_pods.md.
"""

from __future__ import annotations

import json
import logging
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file and variant (path.py[:variant]).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (created; resumed if it exists).")
_ALLOW = flags.DEFINE_list(
    "allow_config_change",
    [],
    "Config fields (or sections) a resumed run may change, e.g. optimizer.lr.",
)
_RERUN = flags.DEFINE_bool(
    "rerun", False, "A finished run: evaluate its final policy again and rewrite its outputs."
)
_DEBUG = flags.DEFINE_bool("debug", False, "Show the traceback of a config error.")
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

EXIT_USAGE = 2  # a command-line or config error (as argparse and most CLIs)
_HELP = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def _config_error(err: BaseException, argv: list[str]) -> str:
    """One line for a flag or config error: the flag, the field and what is allowed."""
    from rlvr_jax.run.cli_errors import describe  # lazy: imports nothing of JAX

    return describe(err, argv)


def _usage_error(message: str):
    print(f"error: {message} (--debug shows the traceback)", file=sys.stderr)
    sys.exit(EXIT_USAGE)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with --help exiting 0 and a config error as one line + exit 2."""
    try:
        rest = flags.FLAGS(argv)
        "seed" in _CONFIG.value  # noqa: B015 - loads the config file now (else lazily), in the try
        return rest
    except SystemExit:
        if any(a in _HELP for a in argv[1:]):
            sys.exit(0)  # absl exits 1 after printing the help
        raise
    except Exception as err:  # noqa: BLE001 - any error of parsing or of loading the config file
        if "--debug" in argv or "--debug=true" in argv:
            raise
        _usage_error(_config_error(err, argv))


def _preflight(config) -> None:
    """Config errors before anything is built: field values, and a refused resume."""
    from rlvr_jax.rl.validate import validate
    from rlvr_jax.run import run_io

    validate(config)
    paths = run_io.RunPaths.of(_WORKDIR.value)
    if paths.config.is_file() and run_io.checkpoint_steps(paths.checkpoints):
        saved = json.loads(paths.config.read_text())
        run_io.check_resumable(saved, json.loads(config.to_json()), paths.config, _ALLOW.value)


def main(argv):
    del argv
    # The imports are here, not at the top: the flags (--help included) parse without
    # loading JAX and the models, and the hosts join before the trainer is imported.
    from rlvr_jax import distributed
    from rlvr_jax.pipeline.config import is_pipeline
    from rlvr_jax.run.run_io import EXIT_PREEMPTED, finished_step

    config, workdir = _CONFIG.value, _WORKDIR.value
    pipeline = is_pipeline(config)
    if not pipeline:
        try:
            _preflight(config)
        except ValueError as err:
            if _DEBUG.value:
                raise
            _usage_error(str(err))
    # Before anything touches a device: every host must join first.
    distributed.initialize(
        _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, auto=_DISTRIBUTED.value
    )
    # orbax logs every checkpoint step at INFO through absl; keep ours at INFO only,
    # and only on the process that logs (the others report warnings and errors).
    absl_logging.set_verbosity(absl_logging.WARNING)
    level = logging.INFO if distributed.is_logging_process() else logging.WARNING
    logging.getLogger("rlvr_jax").setLevel(level)
    from rlvr_jax.rl.config import default_config
    from rlvr_jax.rl.trainer import summary_json, train
    from rlvr_jax.run.report import final_eval, run_summary

    defaults = json.loads(default_config().to_json())  # fields added since the run began
    done = None if pipeline or _RERUN.value else finished_step(workdir, config, defaults)
    if done is not None:  # nothing to run: say so, and where its results are
        if distributed.is_logging_process():
            print(summary_json(final_eval(workdir)))
            print(run_summary(workdir, already_finished=True), end="", file=sys.stderr)
        return
    if pipeline:  # a multi-stage pipeline (rlvr_jax.pipeline)
        from rlvr_jax.pipeline.run import run as train
    result = train(config, workdir, allow_config_change=_ALLOW.value)
    if distributed.is_logging_process():
        print(summary_json(result))
        if not result.get("preempted") and not pipeline:
            print(run_summary(workdir), end="", file=sys.stderr)
    if result.get("preempted"):
        sys.exit(EXIT_PREEMPTED)


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
