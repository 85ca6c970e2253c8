"""log.grad_split through the trainer: the dense term's share of the update is measured.

Issue 31: naive GRPO+OPD ran its OPD term at weight 1, which dominated the outcome term;
`grad_split/dense_over_outcome` is the number that shows such a thing per step.
"""

import json

import numpy as np
import pytest

from rlvr_jax.rl import trainer as trainer_lib
from tests.rl.test_method_experiments import _parity_rewards, load


def _train_lines(c, tmp_path):
    c.eval.at_start = False
    c.checkpoint.export_final = False
    c.log.grad_split = True
    trainer_lib.train(c, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


@pytest.mark.slow
def test_an_outcome_plus_dense_term_run_logs_both_directions(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)
    c = load("saf_opd/saf_opd", "pulse")  # GRPO + the OPD term at weight 1 (no SAF parts)
    c.credit.saf_opd.sparsify = c.credit.saf_opd.compress = c.credit.saf_opd.schedule = False
    train = _train_lines(c, tmp_path / "opd")
    assert [x["step"] for x in train] == [1, 2]
    for x in train:
        assert x["grad_split/outcome_norm"] > 0 and x["grad_split/dense_norm"] > 0
        # The step's value is the mean over its updates of each update's ratio.
        assert 0 < x["grad_split/dense_over_outcome"] < np.inf
    # GRPO alone: no transform, no dense direction.
    base = _train_lines(load("baselines/grpo", "pulse"), tmp_path / "grpo")
    assert all(x["grad_split/dense_norm"] == 0 for x in base)
    assert all(np.isfinite(x["grad_split/outcome_norm"]) for x in base)
