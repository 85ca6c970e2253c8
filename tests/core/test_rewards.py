import numpy as np
import pytest

from rlvr_jax.core.rewards import soft_overlong_penalty


def _reference(length, max_len, cache_len):
    if length <= max_len - cache_len:
        return 0.0
    if length <= max_len:
        return ((max_len - cache_len) - length) / cache_len
    return -1.0


def test_matches_dapo_piecewise_definition():
    lengths = np.arange(0, 30)
    got = np.asarray(soft_overlong_penalty(lengths, max_len=20, cache_len=8))
    want = np.array([_reference(x, 20, 8) for x in lengths], np.float32)
    np.testing.assert_allclose(got, want, atol=1e-7)


def test_hand_computed_points_and_scale():
    got = soft_overlong_penalty(np.array([12, 16, 20, 21]), max_len=20, cache_len=8, penalty=0.5)
    np.testing.assert_allclose(np.asarray(got), [0.0, -0.25, -0.5, -0.5], atol=1e-7)


@pytest.mark.parametrize("cache_len", [0, 21])
def test_invalid_cache_len(cache_len):
    with pytest.raises(ValueError, match="cache_len"):
        soft_overlong_penalty(np.array([1]), max_len=20, cache_len=cache_len)
