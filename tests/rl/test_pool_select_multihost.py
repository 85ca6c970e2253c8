"""Pool schedulers (per-prompt statistics) in a two-process run (CPU, jax.distributed).

Every process runs the same scheduler over the global budget and observes every
host's outcomes (`scheduling.select_hosts`), so the scheduler states stay identical and
each host trains on its own share of the same selection.
"""

import json
import textwrap

import pytest

from rlvr_jax.testing import launch_processes

_CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    import jax
    import numpy as np
    from rlvr_jax import distributed
    port, pid, nproc, path, workdir, out = sys.argv[1:]
    pid, nproc = int(pid), int(nproc)
    if nproc > 1:
        assert distributed.initialize(f"localhost:{port}", nproc, pid, env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

    score.score_rows = parity_score_rows  # parity rewards: mixed groups
    c = multihost_pulse(path, steps=2)
    t = trainer_lib.Trainer.from_config(c, workdir)
    record = {"prompts": [], "states": []}
    pack, step = t.parts.selector._pack, t.parts.selector.step

    def recorded_pack(sel, rows, b):
        record["prompts"].append([int(p) for p in sel.prompt_P])
        return pack(sel, rows, b)

    def recorded_step(*a, **kw):
        res = step(*a, **kw)
        leaves = jax.tree.leaves(t.parts.selector.state)
        digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in leaves))
        record["states"].append(digest.hexdigest())
        return res

    t.parts.selector._pack, t.parts.selector.step = recorded_pack, recorded_step
    finish_child(t, out, record)
    """
)

EXPERIMENTS = {
    "difficulty": "difficulty/difficulty.py",
    "sara": "sara/sara.py",
    "vigor": "vigor/vigor.py",
    "pair": "pair/pair.py",
    "leeps": "leeps/leeps.py",
    "graph": "graph_difficulty/sara_graph.py",  # SARA on the kNN-graph estimator
}


def _launch(tmp_path, path, nproc, tag):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"{tag}_{i}.json" for i in range(nproc)]
    work = tmp_path / tag
    launch_processes(
        script,
        lambda i: [str(nproc), path, str(work), str(outs[i])],
        nproc=nproc,
        devices_per_process=4 // nproc,
        timeout=900,
    )
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_pool_scheduler_states_agree_and_hosts_split_its_selection(tmp_path, name):
    a, b = _launch(tmp_path, EXPERIMENTS[name], 2, "multi")
    assert a["states"] == b["states"] and len(a["states"]) == 2  # identical after each step
    for pa, pb in zip(a["prompts"], b["prompts"], strict=True):
        assert pa and pb and not set(pa) & set(pb)  # each host its own groups
    if name == "sara":  # the same selection as one process fed the same outcomes
        (one,) = _launch(tmp_path, EXPERIMENTS[name], 1, "single")
        assert one["states"] == a["states"]
        joined = [pa + pb for pa, pb in zip(a["prompts"], b["prompts"], strict=True)]
        assert joined == one["prompts"]
        # The scheduler's counts are logged once, not once per process.
        multi, single = (_train_lines(tmp_path / t) for t in ("multi", "single"))
        for m, w in zip(multi, single, strict=True):
            for k in ("select/rollouts", "select/rounds", "select/selected_groups", "kept_groups"):
                assert m[k] == pytest.approx(w[k]), k


def _train_lines(workdir):
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]
