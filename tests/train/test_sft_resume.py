"""A killed SFT / warm start resumes from its checkpoint, and leaves nothing behind.

Before: a killed warm start lost all its progress (403 s in one trial) and left its
`<name>.tmp<pid>` directory in the cache forever.
"""

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import init_model
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train import sft as sft_lib
from rlvr_jax.train import train_sft
from rlvr_jax.train import warmstart as ws_lib
from rlvr_jax.train.warmstart import WarmStartSpec, model_dir, train_warm_start

_EXAMPLES = [("add 1 2", "3"), ("add 2 2", "4"), ("add 3 4", "7"), ("add 1 1", "2")]
KW = dict(steps=6, batch_size=2, lr=1e-2, seed=5, log_every=1)


def _params(model):
    return jax.tree.map(np.asarray, nnx.state(model, nnx.Param))


class Killed(Exception):
    pass


def _kill_at_batch(monkeypatch, n):
    """Raises when the n-th batch (1-based) is built, i.e. before step n runs."""
    original, calls = sft_lib.pad_batch, []

    def pad_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise Killed(f"killed before step {n}")
        return original(*args, **kwargs)

    monkeypatch.setattr(sft_lib, "pad_batch", pad_batch)
    return lambda: monkeypatch.setattr(sft_lib, "pad_batch", original)


def test_killed_sft_resumes_and_ends_bitwise_like_an_uninterrupted_run(tmp_path, monkeypatch):
    tok = toy_tokenizer(128)
    straight = init_model(tiny_config(num_layers=1), seed=0)
    expected = train_sft(straight, tok, _EXAMPLES, **KW)

    model = init_model(tiny_config(num_layers=1), seed=0)
    undo = _kill_at_batch(monkeypatch, 6)  # checkpoints at steps 2 and 4; killed in step 6
    with pytest.raises(Killed):
        train_sft(model, tok, _EXAMPLES, **KW, checkpoint_dir=tmp_path, checkpoint_every=2)
    undo()
    model = init_model(tiny_config(num_layers=1), seed=0)
    calls = []
    original = sft_lib.pad_batch
    monkeypatch.setattr(sft_lib, "pad_batch", lambda *a, **k: calls.append(1) or original(*a, **k))
    result = train_sft(model, tok, _EXAMPLES, **KW, checkpoint_dir=tmp_path, checkpoint_every=2)
    assert len(calls) == 2  # steps 5 and 6 only
    jax.tree.map(np.testing.assert_array_equal, _params(model), _params(straight))
    assert [h["step"] for h in result.history] == [h["step"] for h in expected.history]
    assert [h["loss"] for h in result.history] == [h["loss"] for h in expected.history]


def test_sft_checkpoint_of_another_run_is_refused(tmp_path):
    tok = toy_tokenizer(128)
    model = init_model(tiny_config(num_layers=1), seed=0)
    train_sft(model, tok, _EXAMPLES, **{**KW, "steps": 2}, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="SFT checkpoint of another run"):
        train_sft(model, tok, _EXAMPLES, **{**KW, "steps": 2, "seed": 6}, checkpoint_dir=tmp_path)


SPEC = WarmStartSpec(
    domain="arithmetic",
    role="base",
    task_options=(("max_operand", 5), ("num_operands", 2)),
    hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=1,
    num_kv_heads=1,
    head_dim=32,
    steps=10,
    batch_size=2,
    lr=1e-3,
    num_train_problems=4,
    max_new_tokens=8,
)


def test_killed_warm_start_resumes_and_stale_tmp_dirs_are_removed(tmp_path, monkeypatch):
    tok = toy_tokenizer(128)
    path = model_dir(SPEC, tok, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    (tmp_path / f"{path.name}.tmp{dead}").mkdir()  # left by a killed run
    live = tmp_path / f"{path.name}.tmp{os.getppid()}"  # a live process's: not touched
    live.mkdir()

    undo = _kill_at_batch(monkeypatch, 8)  # checkpoints every step (10 steps // 10)
    with pytest.raises(Killed):
        train_warm_start(SPEC, tokenizer=tok, cache_dir=tmp_path, eval_problems=0)
    undo()
    assert (tmp_path / f"{path.name}.sft").is_dir()
    calls = []
    original = sft_lib.pad_batch
    monkeypatch.setattr(sft_lib, "pad_batch", lambda *a, **k: calls.append(1) or original(*a, **k))
    info = train_warm_start(SPEC, tokenizer=tok, cache_dir=tmp_path, eval_problems=0)
    assert len(calls) == 3  # steps 8, 9, 10
    assert [h["step"] for h in info["history"]] == list(range(1, 11))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([path.name, live.name])  # no .sft, .lock or dead .tmp left


def test_a_second_process_waits_for_the_first_and_reuses_its_model(tmp_path, monkeypatch):
    tok = toy_tokenizer(128)
    spec = dataclasses.replace(SPEC, steps=2)
    path = model_dir(spec, tok, tmp_path)
    trained = []
    original = ws_lib._train_and_save
    monkeypatch.setattr(ws_lib, "_train_and_save", lambda *a: trained.append(1) or original(*a))
    lock = ws_lib.FileLock(path.with_name(path.name + ".lock")).acquire()  # "another process"
    out = {}
    waiter = threading.Thread(
        target=lambda: out.update(
            info=train_warm_start(spec, tokenizer=tok, cache_dir=tmp_path, eval_problems=0)
        )
    )
    waiter.start()
    waiter.join(timeout=2)
    assert waiter.is_alive() and not trained  # waiting for the lock, not training
    original(spec, tok, path, 0, 8)  # the other process finishes the model...
    lock.release()
    waiter.join(timeout=120)
    assert not trained and Path(out["info"]["path"]) == path  # ...and the waiter reuses it
