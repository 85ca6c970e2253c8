"""The mixture task: domain draws by proportion, each problem its domain's, verification routed."""

import json

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.data.pipeline import prompt_batches
from rlvr_jax.data.sources import TaskSource
from rlvr_jax.tasks import CORRECT

OPTS = {"arithmetic": {"num_operands": 3, "max_operand": 9, "operators": "+-"}}


def test_problems_are_their_domains_and_verify_through_them():
    mix = tasks.get("mixture", domains=("countdown", "arithmetic"), domain_options=OPTS)
    arith = tasks.get("arithmetic", **OPTS["arithmetic"])
    count = tasks.get("countdown")
    seen = set()
    for i in range(40):
        p = mix.problem(i, "train")
        d = mix.domain_of(p)
        seen.add(d)
        sub = (arith if d == "arithmetic" else count).problem(i, "train")
        assert (p.prompt, p.answer, p.solution) == (sub.prompt, sub.answer, sub.solution)
        assert p.id == f"mixture/train/{i}"
        assert mix.verify(p, p.solution).reason == CORRECT
        assert mix.verify(p, "Answer: -12345").reason != CORRECT
    assert seen == {"countdown", "arithmetic"}
    # Deterministic, and train/test differ.
    assert mix.problem(3, "train") == mix.problem(3, "train")
    assert mix.problem(3, "train").prompt != mix.problem(3, "test").prompt


def test_proportions_are_respected():
    mix = tasks.get("mixture", domains=["countdown", "arithmetic"], proportions=[3, 1])
    assert mix.proportions == (0.75, 0.25)
    domains = [mix.domain_at(i, "train") for i in range(2000)]
    assert [mix.domain_of(mix.problem(i)) for i in range(5)] == domains[:5]
    share = np.mean([d == "countdown" for d in domains])
    assert abs(share - 0.75) < 0.03  # binomial sd ≈ 0.01
    only = tasks.get("mixture", domains=["countdown", "arithmetic"], proportions=[0, 1])
    assert {only.domain_at(i) for i in range(50)} == {"arithmetic"}


def test_json_options_match_dict_options_and_survive_the_data_pipeline():
    a = tasks.get("mixture", domain_options=OPTS)
    b = tasks.get("mixture", domain_options=json.dumps(OPTS))
    assert [a.problem(i) for i in range(10)] == [b.problem(i) for i in range(10)]
    batch = next(prompt_batches(TaskSource(a, "train", size=16), batch_size=8, seed=0))
    for p in batch.problems():  # metadata went through JSON
        assert a.verify(p, p.solution).reason == CORRECT


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(domains=()), "non-empty"),
        (dict(domains=("countdown", "countdown")), "distinct"),
        (dict(domains=("countdown",), proportions=(0.5, 0.5)), "one share"),
        (dict(domains=("countdown",), proportions=(-1.0,)), "one share"),
        (dict(domains=("countdown",), domain_options={"arithmetic": {}}), "not in domains"),
        (dict(domains=("nosuch",)), "unknown task"),
        (dict(domains=("arithmetic",), domain_options={"arithmetic": {"bad": 1}}), "no options"),
    ],
)
def test_bad_options_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        tasks.get("mixture", **kw)


def test_domain_pass_at_k_groups_problems_by_their_domain():
    from rlvr_jax.tasks.base import Problem
    from rlvr_jax.train.evaluate import domain_pass_at_k

    probs = [Problem(str(i), "", "", "", {"domain": d}) for i, d in enumerate("aabb")]
    out = domain_pass_at_k(probs, [4, 0, 1, 2], 4)
    # pass@1 = mean c/n per domain; pass@4 = 1 unless c = 0.
    assert out == {"pass@1/a": 0.5, "pass@4/a": 0.5, "pass@1/b": 0.375, "pass@4/b": 1.0}
    plain = [Problem("0", "", "", "", {})]
    assert domain_pass_at_k(plain, [1], 4) == {}
