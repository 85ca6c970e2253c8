import pytest

from tests.rollout.common import tiny_policy


@pytest.fixture(scope="module")
def policy():
    """(model, sampler) of a tiny random policy, one per test module."""
    return tiny_policy()
