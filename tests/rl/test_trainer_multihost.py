"""The RL trainer as two real CPU processes (jax.distributed over localhost, 2 devices each).

Each process feeds its own prompt shard; the run is compared with one process over
4 devices fed the same global prompts (shard 0's batch, then shard 1's, per step).
"""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.testing import launch_processes

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import dataclasses, json, sys
    import numpy as np
    from rlvr_jax import distributed
    port, pid, nproc, workdir, steps, out = sys.argv[1:]
    pid, nproc, steps = int(pid), int(nproc), int(steps)
    if nproc > 1:
        assert distributed.initialize(f"localhost:{port}", nproc, pid, env={})
    import jax
    from rlvr_jax.data.pipeline import prompt_batches
    from rlvr_jax.data.sources import TaskSource
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.testing import multihost_pulse

    c = multihost_pulse("baselines/grpo.py", steps=steps)  # 4 prompts x G=4, 4-row micro-batches
    c.loss.kl_coef = 0.05  # the reference scorer on host rows
    c.loss.recompute_old_logps = True
    c.eval.temperature = 0.0  # greedy: the split evaluation's samples equal one process's

    from rlvr_jax.rollout import score
    from rlvr_jax.testing import parity_score_rows

    score.score_rows = parity_score_rows  # parity rewards: groups differ, updates move

    class Concat:
        # One process fed what two processes read: shard 0's batch, then shard 1's.
        def __init__(self, parts):
            self.parts = parts

        def __iter__(self):
            return self

        def __next__(self):
            a, b = (next(p) for p in self.parts)
            return dataclasses.replace(
                a,
                index_B=np.concatenate([a.index_B, b.index_B]),
                epoch_B=np.concatenate([a.epoch_B, b.epoch_B]),
                **{f: getattr(a, f) + getattr(b, f)
                   for f in ("ids", "prompts", "answers", "solutions", "metadata")},
            )

        def get_state(self):
            return {"parts": [p.get_state() for p in self.parts]}

        def set_state(self, state):
            for p, s in zip(self.parts, state["parts"]):
                p.set_state(s)

    t = trainer_lib.Trainer.from_config(c, workdir)
    if nproc == 1:
        t.parts.prompts = Concat([
            prompt_batches(
                TaskSource(t.parts.task, "train", size=c.task.train_size),
                batch_size=c.data.prompts_per_step // 2, seed=c.seed,
                group_size=c.data.group_size, shard_index=i, shard_count=2,
            )
            for i in range(2)
        ])
        # uniform's fresh prompts come from the stream
        t.parts.selector.stream.batches = t.parts.prompts
    try:
        result = t.run()
    finally:
        t.io.close()
    with open(out, "w") as f:
        json.dump(dict(result=result, devices=jax.device_count(), processes=jax.process_count(),
                       local_devices=jax.local_device_count()), f)
    print("DONE", pid)
    """
)


def _launch(tmp_path, workdir, steps, nproc, devices_per_process, tag):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"{tag}_{i}.json" for i in range(nproc)]
    launch_processes(
        script,
        lambda i: [str(nproc), str(workdir), str(steps), str(outs[i])],
        nproc=nproc,
        devices_per_process=devices_per_process,
        timeout=900,
    )
    return [json.loads(o.read_text()) for o in outs]


def _train_lines(workdir):
    lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


@pytest.mark.slow
def test_two_processes_train_resume_and_match_one_process(tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    res = _launch(tmp_path, multi, steps=2, nproc=2, devices_per_process=2, tag="multi")
    assert [(r["processes"], r["devices"], r["local_devices"]) for r in res] == [(2, 4, 2)] * 2
    # Only process 0 writes metrics; both iterator positions are checkpointed.
    train = _train_lines(multi)
    assert [x["step"] for x in train] == [1, 2]
    assert all(np.isfinite(x["loss"]) and x["grad_norm"] > 0 for x in train)
    assert train[-1]["kl"] > 0  # the policy moved away from the reference
    assert all(x["select/sampled_prompts"] == 4 for x in train)  # 2 per process, summed
    files = sorted((multi / "iterators" / "2").iterdir())
    assert [f.name for f in files] == ["process_0-of-2.json", "process_1-of-2.json"]
    assert files[0].read_text() != files[1].read_text()  # each process read its own shard

    # One process over 4 devices, fed both shards' prompts: the same global batches.
    (one,) = _launch(tmp_path, single, steps=2, nproc=1, devices_per_process=4, tag="single")
    assert (one["processes"], one["devices"]) == (1, 4)
    want = _train_lines(single)
    numeric = ["loss", "pg_loss", "grad_norm", "kl", "reward", "response_len", "entropy"]
    for w, g in zip(want, train, strict=True):
        for k in numeric:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # The evaluation (each process samples half the problems, results gathered) equals
    # the one-process run's.
    for k in one["result"]:
        np.testing.assert_allclose(res[0]["result"][k], one["result"][k], rtol=1e-5, err_msg=k)

    # Resume: the same command with steps = 3 continues from the step-2 checkpoint.
    _launch(tmp_path, multi, steps=3, nproc=2, devices_per_process=2, tag="resume")
    train3 = _train_lines(multi)
    assert [x["step"] for x in train3] == [1, 2, 3]
    assert np.isfinite(train3[-1]["loss"])
    assert train3[:2] == train
