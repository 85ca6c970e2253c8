"""Paged engines in a 2-process run (CPU, jax.distributed), 2 devices per process.

Each process samples its own prompts on one engine per local device; a row's id is
its global position (the rows of the processes before it, then its own), so the
rows equal one process sampling every prompt on one engine.
"""

import json
import textwrap

import jax
import numpy as np
import pytest

from rlvr_jax.models import init_model
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import launch_processes, tiny_config

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11], [12], [13, 14], [15, 16, 17]]
_CHILD = textwrap.dedent(
    """
    import json, sys
    from rlvr_jax import distributed
    port, pid, out = sys.argv[1:4]
    assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
    import jax
    from rlvr_jax.models import init_model
    from rlvr_jax.sampling import Sampler, SamplingParams
    from rlvr_jax.sharding import make_mesh
    from rlvr_jax.testing import tiny_config

    prompts = json.loads(sys.argv[4])
    mine = prompts[:4] if pid == "0" else prompts[4:]  # 4 prompts, then 2
    model = init_model(tiny_config(), seed=0)
    sampler = Sampler(
        model, engine="paged", mesh=make_mesh((4, 1, 1)), max_length=48,
        page_size=4, decode_slots=4, prefill_chunk=8,
    )  # fmt: skip
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2)
    r = sampler.sample(mine, params, jax.random.key(7))
    engines = len(sampler.engine_devices())
    rows = [dict(tokens=r.sampled_tokens(b), logps=r.logps[b][r.response_mask[b]].tolist())
            for b in range(len(mine) * 2)]
    with open(out, "w") as f:
        json.dump(dict(rows=rows, engines=engines), f)
    print("DONE", pid)
    """
)


@pytest.mark.slow
def test_each_process_samples_its_rows_as_one_engine_samples_them(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    outs = [tmp_path / f"out_{i}.json" for i in range(2)]
    launch_processes(script, lambda i: [str(outs[i]), json.dumps(PROMPTS)])
    got = [json.loads(o.read_text()) for o in outs]
    assert [g["engines"] for g in got] == [2, 2]  # one engine per local device
    model = init_model(tiny_config(), seed=0)
    one = Sampler(model, engine="paged", max_length=48, page_size=4, decode_slots=4,
                  prefill_chunk=8)  # fmt: skip
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2)
    want = one.sample(PROMPTS, params, jax.random.key(7))
    rows = got[0]["rows"] + got[1]["rows"]  # process 0's 8 rows, then process 1's 4
    assert len(rows) == len(PROMPTS) * 2
    for b, row in enumerate(rows):
        assert row["tokens"] == want.sampled_tokens(b), b
        np.testing.assert_allclose(row["logps"], want.logps[b][want.response_mask[b]], atol=1e-6)
