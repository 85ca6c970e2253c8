"""Dynamic sampling with several rounds in a two-process run (CPU, jax.distributed).

Process 1's verifier gives every row reward 0 in its first two rounds, so its groups
are never mixed and it resamples to the round cap (3); process 0 gets parity rewards
and has its groups earlier. Sampling is a collective, so process 0 must idle through
process 1's extra rounds (scheduling.Lockstep) instead of hanging at the next step's
programs; the step then trains on both processes' kept groups.
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
    import json, sys
    import numpy as np
    from rlvr_jax import distributed
    port, pid, workdir, out = sys.argv[1:]
    pid = int(pid)
    assert distributed.initialize(f"localhost:{port}", 2, pid, env={})
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

    calls = {"rollouts": 0, "recorded": 0}

    def score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
        v = parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids)
        if pid == 1 and calls["rollouts"] <= 2:  # its first two rounds: no mixed group
            v.rewards[:] = 0.0
            v.correct[:] = False
        return v

    score.score_rows = score_rows
    c = multihost_pulse("baselines/dapo.py", steps=1)
    c.select.max_rounds = 3
    t = trainer_lib.Trainer.from_config(c, workdir)
    rollout, outcomes = t.rollout, t.parts.selector._outcomes

    def counted_rollout(request, key):
        calls["rollouts"] += 1
        return rollout(request, key)

    def counted_outcomes(*a):
        calls["recorded"] += 1
        return outcomes(*a)

    t.rollout, t.parts.selector._outcomes = counted_rollout, counted_outcomes
    finish_child(t, out, calls)
    """
)


def launch_two(tmp_path, child: str, *args) -> None:
    """Runs `child` (a script taking port, process id, *args) as 2 processes x 2 CPU devices."""
    script = tmp_path / "child.py"
    script.write_text(child)
    launch_processes(script, lambda i: [a(i) for a in args])


@pytest.mark.slow
def test_dynamic_sampling_rounds_stay_in_step_across_processes(tmp_path):
    workdir = tmp_path / "run"
    outs = [tmp_path / f"calls_{i}.json" for i in range(2)]
    launch_two(tmp_path, _CHILD, lambda i: str(workdir), lambda i: str(outs[i]))
    calls = [json.loads(o.read_text()) for o in outs]
    # Process 1 sampled (and recorded) 3 rounds; process 0 recorded fewer and idled
    # through the rest: both ran the rollout's collectives equally often.
    assert calls[1]["recorded"] == 3
    assert calls[0]["recorded"] < 3
    assert calls[0]["rollouts"] == calls[1]["rollouts"] == 3
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    (train,) = [x for x in lines if x["split"] == "train"]
    assert train["select/rounds"] == (calls[0]["recorded"] + 3) / 2  # mean over processes
    assert np.isfinite(train["loss"]) and train["grad_norm"] > 0
