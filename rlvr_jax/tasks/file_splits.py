"""Hashed train / validation / test splits of a data file's records, shared by the tasks
that read a user's file (`math_file`, `code`).

Record i goes to a split by u = sha256(seed | key_i) read as a number in [0, 1):
train below f_train, validation below f_train + f_validation, else test. A record
keeps its split whatever the file's order or size, so adding records never moves
one between splits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from rlvr_jax.tasks.base import SPLITS


def check_fractions(split_fractions) -> tuple[float, float, float]:
    """(train, validation, test) shares as floats; ValueError unless 3 numbers >= 0 sum to 1."""
    fractions = tuple(float(f) for f in split_fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(
            "split_fractions must be 3 numbers >= 0 summing to 1 (train, validation, "
            f"test), got {tuple(split_fractions)}"
        )
    return fractions


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {SPLITS}")


def hashed_splits(keys: Sequence[str], seed: int, fractions) -> dict[str, tuple[int, ...]]:
    """Record indices per split (module docstring), in file order."""
    bounds = (fractions[0], fractions[0] + fractions[1])
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, key in enumerate(keys):
        digest = hashlib.sha256(f"{seed}|{key}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2.0**64
        out[SPLITS[0] if u < bounds[0] else SPLITS[1] if u < bounds[1] else SPLITS[2]].append(i)
    return {s: tuple(v) for s, v in out.items()}


class FileSplits:
    """`num_problems`, `num_skipped` and the record behind a problem index, for a task
    whose `_data()` returns (records, `hashed_splits`, number of records skipped)."""

    def _data(self) -> tuple[tuple[dict, ...], dict[str, tuple[int, ...]], int]:
        raise NotImplementedError

    def num_problems(self, split: str = "train") -> int:
        """Number of records in `split`."""
        check_split(split)
        return len(self._data()[1][split])

    def num_skipped(self) -> int:
        """Malformed records skipped while loading (0 with on_error="raise")."""
        return self._data()[2]

    def _record_at(self, index: int, split: str) -> dict:
        """The `index`-th record of `split` in file order; IndexError outside the split."""
        check_split(split)
        records, splits, _ = self._data()
        if not 0 <= index < len(splits[split]):
            raise IndexError(
                f"problem index {index} out of range: split {split!r} has "
                f"{len(splits[split])} problems"
            )
        return records[splits[split][index]]
