"""The file tasks' hashed splits: an independent recomputation, stability and bad input."""

import hashlib

import pytest

from rlvr_jax.tasks.file_splits import check_fractions, check_split, hashed_splits


def test_hashed_splits_equal_a_recomputation_and_survive_appended_records():
    keys = [f"record-{i}" for i in range(200)]
    got = hashed_splits(keys, 7, (0.6, 0.3, 0.1))

    def u(key):  # sha256(seed | key), its first 8 bytes big-endian, over 2^64
        return int(hashlib.sha256(f"7|{key}".encode()).hexdigest()[:16], 16) / 2**64

    want = {"train": [], "validation": [], "test": []}
    for i, k in enumerate(keys):
        want["train" if u(k) < 0.6 else "validation" if u(k) < 0.9 else "test"].append(i)
    assert got == {s: tuple(v) for s, v in want.items()}
    assert all(len(v) > 5 for v in got.values())
    more = hashed_splits(keys + [f"new-{i}" for i in range(50)], 7, (0.6, 0.3, 0.1))
    for split, ids in got.items():  # the old records keep their splits and their order
        assert tuple(i for i in more[split] if i < 200) == ids
    assert hashed_splits(keys, 8, (0.6, 0.3, 0.1)) != got  # the seed reshuffles


def test_bad_fractions_and_splits_are_named():
    assert check_fractions([0, 0, 1]) == (0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="summing to 1.*got \\(0.5, 0.6, 0.0\\)"):
        check_fractions((0.5, 0.6, 0.0))
    with pytest.raises(ValueError, match="3 numbers"):
        check_fractions((0.5, 0.5))
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        check_split("dev")
