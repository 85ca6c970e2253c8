"""Rollout plug-ins in multi-process runs: they run (2 CPU processes) or raise naming the field."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.testing import launch_processes

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import sys
    from rlvr_jax import distributed
    port, pid, workdir, name = sys.argv[1:]
    name, _, variant = name.partition(":")
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

    score.score_rows = parity_score_rows  # groups differ, updates move
    c = multihost_pulse(f"{name}.py", steps=1, variant=variant or "pulse")
    t = trainer_lib.Trainer.from_config(c, workdir)
    finish_child(t)
    """
)


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


_GRSD_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from rlvr_jax import distributed
    port, pid, workdir, out = sys.argv[1:]
    pid = int(pid)
    assert distributed.initialize(f"localhost:{port}", 2, pid, env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        v = parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        if pid == 1:  # no mixed group here: process 1 joins process 0's guidance calls
            v.rewards[:] = 0.0
            v.correct[:] = False
        return v

    score.score_rows = score_rows
    c = multihost_pulse("grsd/grsd.py", steps=2)
    t = trainer_lib.Trainer.from_config(c, workdir)
    guided, rollout = [], t.rollout

    def counted(request, key):
        groups = rollout(request, key)
        guided.append(int((groups.info["guidance_ids_BxN"] >= 0).any(-1).sum()))
        return groups

    t.rollout = counted
    finish_child(t, out, guided)
    """
)


@pytest.mark.slow
def test_grsd_guidance_runs_when_only_one_process_has_mixed_groups(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_GRSD_CHILD)
    workdir, outs = tmp_path / "run", [tmp_path / f"guided_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(workdir), str(outs[i])])
    guided = [json.loads(o.read_text()) for o in outs]
    assert sum(guided[0]) > 0 and sum(guided[1]) == 0, guided
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert len(train) == 2 and all(np.isfinite(x["loss"]) for x in train)


_LSPO_CHILD = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, workdir, out = sys.argv[1:]
    pid = int(pid)
    assert distributed.initialize(f"localhost:{port}", 2, pid, env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score, scaffold
    from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        v = parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        v.rewards[:] = float(pid == 1)  # cliffs (all-fail groups) on process 0 only
        v.correct[:] = pid == 1
        return v

    score.score_rows = score_rows
    fits, fit = [], scaffold.fit_adapter

    def recorded_fit(ctx, sc, pairs, **kw):
        loss = fit(ctx, sc, pairs, **kw)
        fits.append(dict(pairs=len(pairs), loss=loss, seed=kw["seed"]))
        return loss

    scaffold.fit_adapter = recorded_fit
    c = multihost_pulse("lspo/lspo.py", steps=2)
    t = trainer_lib.Trainer.from_config(c, workdir)
    finish_child(t, out, fits)
    """
)


@pytest.mark.slow
def test_lspo_fits_one_adapter_on_every_hosts_cliffs(tmp_path):
    """Process 0 has every cliff; both fit the same adapter on them, process 1 joins the
    re-roll call with a filler row, and the step trains on both hosts' rows."""
    script = tmp_path / "child.py"
    script.write_text(_LSPO_CHILD)
    workdir = tmp_path / "run"
    outs = [tmp_path / f"fits_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(workdir), str(outs[i])])
    a, b = (json.loads(o.read_text()) for o in outs)
    assert len(a) == 2 and a == b  # one fit per step, the same pairs, seed and loss on both
    assert all(f["pairs"] == 2 and np.isfinite(f["loss"]) for f in a)  # process 0's 2 groups
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert len(train) == 2 and all(np.isfinite(x["loss"]) for x in train)
    assert all(x["rollout/cliff_groups"] == 2 for x in train)  # summed over the hosts
