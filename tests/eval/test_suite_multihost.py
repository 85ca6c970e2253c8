"""A run's paper suite (eval.suite) split over two processes (CPU, jax.distributed).

Each process samples its share of each benchmark's problems (problem c·2 + j of
call c on process j); the records are gathered, so both report the result over
every problem. Oracles: under greedy decoding the split equals every process
sampling every problem itself; a second evaluation at the same step is read from
the cache process 0 wrote, samples nothing and gives the same numbers.
"""

import json
import textwrap

import pytest

from rlvr_jax.testing import launch_processes

_CHILD = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, workdir, data, out = sys.argv[1:]
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    from rlvr_jax.eval import runner
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.testing import multihost_pulse

    seen = []  # the item id of each record this process scored
    record = runner._record

    def recording(item, *args, **kw):
        seen.append(item.id)
        return record(item, *args, **kw)

    runner._record = recording
    c = multihost_pulse("baselines/grpo.py")
    c.eval.suite, c.eval.suite_data = "math", data
    c.eval.suite_n_samples, c.eval.suite_ks = 2, "1,2"
    c.eval.suite_num_problems = 3  # 2 + 1: call 1 pads process 1 with a repeat
    c.eval.suite_max_new_tokens = 8
    c.eval.temperature = 0.0
    t = trainer_lib.Trainer.from_config(c, workdir)
    split = t.evaluate_suite()
    mine = list(seen)
    seen.clear()
    again = t.evaluate_suite()  # the same step: from the cache
    cached = list(seen)
    settings = runner.Settings(
        n_samples=2, ks=(1, 2), temperature=0.0, max_new_tokens=8, seed=c.seed + 3,
        num_problems=3, engine="static",
    )
    every = runner.run_suite(t.parts.model, t.parts.tokenizer, "math", data, settings,
                             show_progress=False)
    t.io.close()
    with open(out, "w") as f:
        json.dump(dict(split=split, again=again, mine=mine, cached=cached,
                       every={f"suite/{b}/{m}": v["value"] for b, r in every["benchmarks"].items()
                              for m, v in r["metrics"].items()}), f)
    print("DONE", pid)
    """
)


@pytest.mark.slow
def test_suite_splits_problems_over_processes_and_reads_its_cache_back(tmp_path):
    from tests.eval.test_suite_end_to_end import DATA

    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"out_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(tmp_path / "run"), str(DATA), str(outs[i])])
    a, b = (json.loads(o.read_text()) for o in outs)
    # 15 problems (3, 3, 2, 3, 2, 2 per benchmark): process 0 scores positions 0 and 2,
    # process 1 position 1 (and samples a repeat of position 2 it does not score).
    assert (len(a["mine"]), len(b["mine"])) == (9, 6)
    assert a["cached"] == b["cached"] == []  # nothing sampled the second time
    for r in (a, b):
        assert r["split"] == a["split"] == r["again"]
        assert {k: v for k, v in r["split"].items() if not k.startswith("suite/average")} == (
            pytest.approx(r["every"])
        )
