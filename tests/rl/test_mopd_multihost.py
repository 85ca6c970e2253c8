"""MOPD in a two-process run (CPU, jax.distributed): per-domain teachers, unequal routing.

Each process routes its own rows to its domains' teachers, so a teacher may get
rows from one process and none from the other; its scorer is a collective, so
every process joins each teacher's call with its own rows padded to one shape.
"""

import json

import numpy as np
import pytest

from .test_rollout_experiments import load
from .test_select_multihost import launch_two

DOMAINS = ("arithmetic", "countdown")

_CONFIG = """
import json
from rlvr_jax.train.warmstart import TASK_OPTIONS
c.task.name = "mixture"
c.task.options = json.dumps(dict(
    domains=list(DOMAINS), proportions=[0.5, 0.5],
    domain_options={d: TASK_OPTIONS[d] for d in DOMAINS}), sort_keys=True)
c.score.signals = "mopd"
"""

_CHILD = (
    """
import json, sys
from rlvr_jax import distributed
port, pid, workdir, teachers, out = sys.argv[1:]
assert distributed.initialize(f"localhost:{port}", 2, int(pid), env={})
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.methods import mopd
from rlvr_jax.rollout import score
from rlvr_jax.testing import finish_child, multihost_pulse, parity_score_rows

score.score_rows = parity_score_rows  # groups differ, updates move
c = multihost_pulse("opdvr/opdvr.py", steps=2)
DOMAINS = ("arithmetic", "countdown")
"""
    + _CONFIG
    + """
c.score.mopd.teachers = teachers
rows = {}
load_teacher = mopd.load_teacher

class Counted:  # a teacher that counts the rows this process routes to it
    def __init__(self, scorer, path):
        self.scorer, self.path = scorer, path

    def logps(self, tokens, attn):
        rows[self.path] = rows.get(self.path, 0) + len(tokens)
        return self.scorer.logps(tokens, attn)

mopd.load_teacher = lambda ctx, **s: Counted(load_teacher(ctx, **s), s["path"])
t = trainer_lib.Trainer.from_config(c, workdir)
finish_child(t, out, rows)
"""
)


@pytest.mark.slow
def test_mopd_routes_each_process_rows_to_its_domain_teachers(tmp_path):
    from rlvr_jax.models import init_model, save_pretrained
    from rlvr_jax.rl import build
    from rlvr_jax.train import warmstart

    c = load("opdvr/opdvr", "pulse")
    exec(_CONFIG, {"c": c, "DOMAINS": DOMAINS})
    policy, tokenizer = build.build_policy(c)
    paths = {}
    for i, d in enumerate(DOMAINS):  # the policy's architecture and tokenizer, other weights
        paths[d] = str(tmp_path / f"teacher_{d}")
        save_pretrained(init_model(policy.config, seed=i + 1), policy.config, paths[d])
        warmstart.save_tokenizer(tokenizer, paths[d])
    teachers = json.dumps({d: {"path": p} for d, p in paths.items()})
    workdir, outs = tmp_path / "run", [tmp_path / f"rows_{i}.json" for i in range(2)]
    launch_two(tmp_path, _CHILD, lambda i: str(workdir), lambda i: teachers, lambda i: str(outs[i]))
    rows = [json.loads(o.read_text()) for o in outs]
    for d in DOMAINS:  # both teachers got rows (from either process)
        assert sum(r.get(paths[d], 0) for r in rows) > 0, rows
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert len(train) == 2 and all(np.isfinite(x["loss"]) for x in train)
