"""Rollout plug-ins in multi-process runs: they run (2 CPU processes) or raise naming the field."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.testing import launch_processes

from .test_rollout_experiments import load

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import importlib.util, sys
    from rlvr_jax import distributed
    port, pid, workdir, name = sys.argv[1:]
    name, _, variant = name.partition(":")
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import parity_score_rows

    score.score_rows = parity_score_rows  # groups differ, updates move
    spec = importlib.util.spec_from_file_location("exp", f"experiments/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config(variant or "pulse")
    c.mesh.shape = (1, -1, 1)
    c.eval.at_start = False
    c.checkpoint.export_final = False
    c.train.steps = 1
    c.train.num_minibatches = 1
    t = trainer_lib.Trainer(c, workdir)
    try:
        t.run()
    finally:
        t.io.close()
    print("DONE", pid)
    """
)


@pytest.mark.parametrize("name", ["lspo/lspo", "grsd/grsd"])
def test_per_host_rollouts_refuse_several_processes(name, monkeypatch):
    c = load(name, "pulse")
    monkeypatch.setattr(trainer_lib.jax, "process_count", lambda: 2)
    with pytest.raises(NotImplementedError, match=f"config.rollout.name = '{c.rollout.name}'"):
        trainer_lib._check_processes(c, None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "oc_grpo/oc_grpo",
        "nc_grpo/nc_grpo",
        "agentic/tool_lookup",
        "cbpo/cbpo",
        "cbpo/cbpo:tool_lookup,pulse",  # branches resume episodes on each host
    ],
)
def test_rollout_runs_in_two_processes(name, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    workdir = tmp_path / "run"
    launch_processes(script, lambda i: [str(workdir), name])
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    (train,) = [x for x in lines if x["split"] == "train"]
    assert np.isfinite(train["loss"]) and train["select/sampled_prompts"] == 4
