"""A loaded teacher's scorer in a two-process run (CPU, jax.distributed).

The teacher (a pretrained directory, not the policy under a hint) is sharded on the
policy's mesh and scores each process's own rows, like the policy's scorer. Without
that, each process handed the teacher's program its host rows as if they were the
global batch, and the run failed (a host's 2 rows cannot split over the 4 devices).
"""

import json

import numpy as np
import pytest

from .test_rollout_experiments import load
from .test_select_multihost import launch_two

_CHILD = """
import sys
from rlvr_jax import distributed
port, pid, workdir, teacher = sys.argv[1:]
assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rollout import score
from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

score.score_rows = parity_score_rows  # groups differ, updates move
c = multihost_pulse("opdvr/opdvr.py", steps=1)
c.score.teacher.source, c.score.teacher.path = "pretrained", teacher
t = trainer_lib.Trainer.from_config(c, workdir)
finish_child(t)
"""


@pytest.mark.slow
def test_pretrained_teacher_scores_each_process_rows(tmp_path):
    from rlvr_jax.models import init_model, save_pretrained
    from rlvr_jax.rl import build
    from rlvr_jax.train import warmstart

    policy, tokenizer = build.build_policy(load("opdvr/opdvr", "pulse"))
    teacher = tmp_path / "teacher"  # the policy's architecture and tokenizer, other weights
    save_pretrained(init_model(policy.config, seed=1), policy.config, teacher)
    warmstart.save_tokenizer(tokenizer, teacher)
    workdir = tmp_path / "run"
    launch_two(tmp_path, _CHILD, lambda i: str(workdir), lambda i: str(teacher))
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    (train,) = [x for x in lines if x["split"] == "train"]
    assert np.isfinite(train["loss"]) and train["grad_norm"] > 0
