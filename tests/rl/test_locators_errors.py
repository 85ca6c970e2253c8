"""The judge's error distribution against the exact locator, by hand."""

import numpy as np
import pytest

from rlvr_jax.rl.methods.locators import locator_errors


def test_locator_errors_by_hand():
    exact = np.array([5, 5, 5, 5, -1, -1, 3, 0])
    got = np.array([2, 5, 9, -1, -1, 4, 3, 1])
    # early: row 0; exact: rows 1, 4 (both none), 6; late: rows 2, 7; missed: row 3;
    # spurious: row 5.
    e = locator_errors(got, exact)
    assert e == pytest.approx(
        {"early": 1 / 8, "exact": 3 / 8, "late": 2 / 8, "missed": 1 / 8, "spurious": 1 / 8}
    )
    assert sum(e.values()) == pytest.approx(1.0)
    assert locator_errors(np.array([], int), np.array([], int)) == dict.fromkeys(e, 0.0)
