"""Pipelines: stages across training runs (SFT, DPO, OPD, RL, merge) in one workdir.

  from rlvr_jax.pipeline.run import run
  run(config, workdir)        # a config from rlvr_jax.pipeline.config

See `pipeline.config` (stages, switch rules), `pipeline.stages` (the kinds),
`pipeline.run` (the workdir layout and resume).
"""
