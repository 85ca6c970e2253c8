"""A pipeline (sft → dpo → rl → merge, each export evaluated) as two CPU processes vs one.

The SFT stage's export and every evaluation must equal the one-process run's
(greedy evaluation); each process evaluates its own share of the problems. The
DPO and RL stages read a different prompt shard per process (as the RL trainer
does), so their exports are not the one-process run's: the one process instead
evaluates the two-process run's DPO, RL and merge exports, and the merge is
checked against task arithmetic of the exports it merged.
"""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.testing import launch_processes

STAGES = ("sft", "dpo", "rl", "merge")
TRAINED = ("dpo", "rl", "merge")  # exports that differ from the one-process run's

_CHILD = f"TRAINED = {TRAINED}\n" + textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from rlvr_jax import distributed
    port, pid, nproc, workdir, out, other = sys.argv[1:]
    pid, nproc = int(pid), int(nproc)
    if nproc > 1:
        assert distributed.initialize(f"localhost:{port}", nproc, pid, env={})
    import jax
    from rlvr_jax.pipeline import evaluate, run
    from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import parity_score_rows

    seen, phase = {}, []  # model -> the eval prompts this process scored

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        if not phase:  # training rollouts: parity rewards, so the RL update moves
            return parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        seen.setdefault(phase[-1], []).extend(p.prompt for p in problems_R)
        return real_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)

    real_score_rows, score.score_rows = score.score_rows, score_rows
    evaluate_checkpoint = evaluate.evaluate_checkpoint

    def tagged(model_dir, specs, e):
        d = Path(model_dir)
        phase.append(d.parent.name if d.name == "export" else "base")
        try:
            return evaluate_checkpoint(model_dir, specs, e)
        finally:
            phase.pop()

    evaluate.evaluate_checkpoint = tagged
    c = pipeline_config()
    add_stage(c, "sft", "sft")
    add_stage(c, "dpo", "dpo")
    add_stage(c, "rl", "rl")
    merge = add_stage(c, "merge", "merge", init="base")
    merge.run.specialists, merge.run.lambdas = "sft,rl", "0.5,0.7"
    apply_pulse(c)
    c.eval.num_problems, c.eval.n_samples, c.eval.temperature = 5, 2, 0.0  # 3 + 2
    for name in ("dpo", "rl"):  # the trainer's mesh must span every process's devices
        c.stages[name].run.mesh.shape = (1, -1, 1)
    result = run.run(c, workdir)
    others = {}
    if other:  # one process: evaluate the two-process run's trained and merged exports
        for name in TRAINED:
            others[name] = evaluate.evaluate_checkpoint(
                f"{other}/stages/{name}/export", evaluate.eval_tasks(c), c.eval
            )
    with open(out, "w") as f:
        json.dump(dict(result=result, seen=seen, others=others,
                       processes=jax.process_count()), f)
    print("DONE", pid)
    """
)


def _launch(tmp_path, workdir, nproc, other=""):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"{nproc}_{i}.json" for i in range(nproc)]
    launch_processes(
        script,
        lambda i: [str(nproc), str(workdir), str(outs[i]), str(other)],
        nproc=nproc,
        devices_per_process=4 // nproc,
    )
    return [json.loads(o.read_text()) for o in outs]


def _weights(workdir, stage):
    from safetensors.numpy import load_file

    return load_file(Path(workdir) / "stages" / stage / "export" / "model.safetensors")


def _close(a, b, **kw):
    a, b = (json.loads(json.dumps(x)) for x in (a, b))
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _close(a[k], b[k], **kw)
    elif isinstance(a, (int, float, list)) and not isinstance(a, bool):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), **kw)
    else:
        assert a == b


@pytest.mark.slow
def test_pipeline_in_two_processes_matches_one_and_splits_evaluation(tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    two = _launch(tmp_path, multi, nproc=2)
    assert [r["processes"] for r in two] == [2, 2]
    # Each process evaluated its own share of every checkpoint's 5 problems.
    for model in ("base", *STAGES):
        a, b = (r["seen"][model] for r in two)
        assert len(set(a)) == 3 and len(set(b)) == 2 and not set(a) & set(b), model
    assert two[0]["result"] == two[1]["result"]  # both hold the gathered evaluations
    # Files written once, by process 0, and complete.
    for name in STAGES:
        assert json.loads((multi / "stages" / name / "stage.json").read_text())["kind"] == name
    assert sorted(p.name for p in (multi / "eval").iterdir()) == [
        f"{m}.json" for m in sorted(("base", *STAGES))
    ]
    dpo = [json.loads(x) for x in (multi / "stages/dpo/metrics.jsonl").read_text().splitlines()]
    train = [r for r in dpo if r["split"] == "train"]
    assert train and all(np.isfinite(r["loss"]) for r in train)
    assert sum(r["pairs"] for r in train) > 0  # pairs of both processes in one update
    assert not [p for p in multi.rglob("*.tmp*")]

    (one,) = _launch(tmp_path, single, nproc=1, other=multi)
    assert all(len(set(prompts)) == 5 for prompts in one["seen"].values())
    # The same config: the SFT export and the base / SFT evaluations agree.
    for name, w in _weights(single, "sft").items():
        np.testing.assert_allclose(_weights(multi, "sft")[name], w, rtol=1e-4, atol=1e-6)
    for model in ("base", "sft"):
        _close(two[0]["result"]["eval"][model], one["result"]["eval"][model], rtol=1e-5)
    for stage in ("base", "sft"):
        saved = [json.loads((d / "eval" / f"{stage}.json").read_text()) for d in (multi, single)]
        _close(saved[0]["results"], saved[1]["results"], rtol=1e-5)
    # The two-process trained and merged exports, evaluated by one process, score the same.
    for name in TRAINED:
        saved = json.loads((multi / "eval" / f"{name}.json").read_text())["results"]
        _close(saved, one["others"][name], rtol=1e-5)
    # The RL stage moved the weights; the merge is θ_0 + 0.5(θ_sft − θ_0) + 0.7(θ_rl − θ_0).
    from safetensors.numpy import load_file

    base = load_file(multi / "base" / "model.safetensors")
    sft, rl, merged = (_weights(multi, s) for s in ("sft", "rl", "merge"))
    assert any(not np.array_equal(rl[k], sft[k]) for k in rl)
    for k, b in base.items():
        want = b + 0.5 * (sft[k] - b) + 0.7 * (rl[k] - b)
        np.testing.assert_allclose(merged[k], want, rtol=1e-5, atol=1e-6, err_msg=k)


_SFT_CHILD = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, nproc, workdir, out, mesh = sys.argv[1:]
    pid, nproc = int(pid), int(nproc)
    if nproc > 1:
        assert distributed.initialize(f"localhost:{port}", nproc, pid, env={})
    import jax
    from flax import nnx
    from rlvr_jax.pipeline import execution, run
    from rlvr_jax.pipeline.config import add_stage, apply_pulse, pipeline_config

    placed = []  # (devices, processes, fully replicated) of the policy's embedding
    load_policy = execution.load_policy

    def recording(c, init_dir):
        model, m, rules = load_policy(c, init_dir)
        embed = nnx.state(model, nnx.Param)["embed_tokens"][...]
        devices = embed.sharding.device_set
        placed.append((len(devices), len({d.process_index for d in devices}),
                       embed.sharding.is_fully_replicated))
        return model, m, rules

    execution.load_policy = recording
    c = pipeline_config()
    s = add_stage(c, "sft", "sft")
    apply_pulse(c)
    s.run.train.steps = 4
    c.eval.enabled = False
    if mesh == "mesh":  # the SFT stage's own mesh and precision blocks, rows split
        execution.apply(c, mesh_shape=(1, -1, 1))
    result = run.run(c, workdir)
    with open(out, "w") as f:
        json.dump(dict(steps=result["stages"]["sft"]["steps"], placed=placed,
                       processes=jax.process_count()), f)
    print("DONE", pid)
    """
)


@pytest.mark.slow
def test_sft_stage_mesh_fields_in_two_processes_equal_one_device(tmp_path):
    """The SFT stage's optional mesh (1, -1, 1) over 2 processes x 2 devices: the policy
    is split over all 4 devices of both processes, each step's rows over data x fsdp,
    and the export equals the one-process, one-device stage without the blocks."""
    script = tmp_path / "sft_child.py"
    script.write_text(_SFT_CHILD)

    def launch(label, nproc, mesh):
        outs = [tmp_path / f"{label}_{i}.json" for i in range(nproc)]
        launch_processes(
            script,
            lambda i: [str(nproc), str(tmp_path / label), str(outs[i]), mesh],
            nproc=nproc,
            devices_per_process=2 if nproc > 1 else 1,
        )
        return [json.loads(o.read_text()) for o in outs]

    two = launch("two", 2, "mesh")
    assert [r["processes"] for r in two] == [2, 2] and all(r["steps"] == 4 for r in two)
    # Every process loaded the policy onto 4 devices of 2 processes, split (not replicated).
    assert all(r["placed"] == [[4, 2, False]] for r in two), two
    (one,) = launch("one", 1, "")
    assert one["steps"] == 4 and one["placed"] == [[1, 1, True]]
    written = json.loads((tmp_path / "two/stages/sft/config.json").read_text())
    assert written["mesh"]["shape"] == [1, -1, 1]
    a, b = _weights(tmp_path / "two", "sft"), _weights(tmp_path / "one", "sft")
    assert sorted(a) == sorted(b)
    for name, w in b.items():
        np.testing.assert_allclose(a[name], w, rtol=1e-4, atol=1e-6, err_msg=name)
    from safetensors.numpy import load_file

    base = load_file(tmp_path / "one" / "base" / "model.safetensors")
    assert any(not np.array_equal(b[k], base[k]) for k in base)  # the stage trained
