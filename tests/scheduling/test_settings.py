"""Scheduler and estimator settings: checks that name the field, options reaching the estimator,
and PAIR's remaining-token prior as the predictor's guess before any data."""

import numpy as np
import pytest

from rlvr_jax import scheduling as S
from rlvr_jax.scheduling.estimators import GraphEstimator
from rlvr_jax.scheduling.pair import PAIR


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("num_states", 1, ">= 2"),
        ("neighbours", 0, ">= 1"),
        ("coupling", -0.5, ">= 0"),
        ("prior_strength", 0.0, "> 0"),
        ("decay", 1.5, r"in \(0, 1\]"),
        ("sweeps", 0, ">= 1"),
        ("hops", -1, ">= 0"),
    ],
)
def test_graph_estimator_rejects_bad_settings_naming_the_field(field, value, rule):
    with pytest.raises(ValueError, match=rf"GraphEstimator.{field} = {value}; must be {rule}"):
        GraphEstimator(**{field: value})


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("prefix_tokens", 0, ">= 1"),
        ("suffix_budget", 0.0, "> 0"),
        ("pi_min", 0.0, r"in \(0, 1\]"),
        ("prior_remaining", 0.0, "> 0"),
        ("ridge", -1.0, "> 0"),
    ],
)
def test_pair_rejects_bad_settings_naming_the_field(field, value, rule):
    with pytest.raises(ValueError, match=rf"PAIR.{field} = {value}; must be {rule}"):
        PAIR(**{field: value})


def test_make_scheduler_passes_estimator_options():
    sched = S.make_scheduler(
        "sara", difficulty="graph", difficulty_options={"num_states": 3, "neighbours": 2}
    )
    assert sched.estimator == GraphEstimator(num_states=3, neighbours=2)
    emb = np.random.default_rng(0).normal(size=(12, 4)).astype(np.float32)
    state = sched.init(S.Pool(12, emb), S.Budget(2, 4, 16))
    assert state["est"]["q"].shape == (12, 3)  # K = 3 states
    np.testing.assert_allclose(state["est"]["q"], 1 / 3)
    # Each node has at least its own 2 nearest neighbours (the graph is symmetrised).
    assert np.all((state["est"]["w"] > 0).sum(1) >= 2)
    with pytest.raises(ValueError, match="need a difficulty estimator name"):
        S.make_scheduler("sara", difficulty_options={"num_states": 3})


@pytest.mark.parametrize("prior", [3.0, 30.0, 256.0])
def test_pair_predicts_the_prior_before_any_data(prior):
    # The ridge prior puts β = (log(1 + prior), 0, 0): zero features predict exactly `prior`;
    # other features too, since the slopes start at 0.
    sched = PAIR(prior_remaining=prior)
    state = sched.init(S.Pool(4), S.Budget(1, 4, 8))
    p, remaining = sched.predict(state, np.array([[0.0, 0.0], [-1.5, 2.0]], np.float32))
    np.testing.assert_allclose(remaining, [prior, prior], rtol=1e-5)
    np.testing.assert_allclose(p, [0.5, 0.5])  # logistic weights start at 0
