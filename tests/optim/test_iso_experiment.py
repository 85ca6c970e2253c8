"""experiments/iso: the config names ISO; its 2-step pulse moves the weights, not their spectra."""

import numpy as np
import pytest
from flax import nnx

from rlvr_jax.analysis.checkpoints import load_policy
from rlvr_jax.optim.iso import chosen_paths, flatten
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.build import build_policy
from rlvr_jax.rl.config import validate

from ..rl.test_method_experiments import load
from ..rl.test_trainer import _parity_rewards


@pytest.mark.parametrize("variant", ["", "arithmetic", "pulse"])
def test_iso_config(variant):
    c = load("iso/iso", variant)
    validate(c)
    assert c.optimizer.name == "iso" and c.optimizer.iso.retraction == "qr"
    assert c.optimizer.iso.base == "adamw" and c.credit.name == "grpo"


@pytest.mark.slow
def test_iso_pulse_keeps_every_spectrum(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    c = load("iso/iso", "pulse")
    c.eval.at_start = False
    trainer_lib.train(c, tmp_path)
    start, _ = build_policy(c)  # the random initial policy (seeded)
    end, _ = load_policy(tmp_path)
    p0, p1 = nnx.state(start, nnx.Param), nnx.state(end, nnx.Param)
    paths = chosen_paths(p0, c.optimizer.iso.include)
    assert len(paths) == 7 * start.config.num_layers
    f0, f1 = flatten(p0), flatten(p1)
    moved = 0.0
    for path in paths:
        s0 = np.linalg.svd(np.asarray(f0[path], np.float64), compute_uv=False)
        s1 = np.linalg.svd(np.asarray(f1[path], np.float64), compute_uv=False)
        np.testing.assert_allclose(s1, s0, rtol=1e-5, atol=1e-6)
        moved = max(moved, float(np.abs(np.asarray(f1[path]) - np.asarray(f0[path])).max()))
    assert moved > 1e-5  # the frames did move
