"""The update metrics' reduction over a step's updates, by hand-computed cases."""

import numpy as np
import pytest

from rlvr_jax.rl.step_metrics import reduce_update_metrics


def _update(loss, tokens, ratio, clip_high, guided_tokens, guided_w, empty=0.0):
    return {
        "loss": np.float32(loss),
        "grad_norm": np.float32(2 * loss),
        "token_sums": {"tokens": tokens, "ratio": ratio, "clip_high": clip_high, "kl": 0.5},
        "subset_sums": {
            "guided": {"tokens": guided_tokens, "is_weight": guided_w},
            "scaffold": {"tokens": empty, "is_weight": 0.0},
        },
    }


def test_scalars_average_over_updates_and_token_stats_over_tokens():
    out = reduce_update_metrics(
        [_update(1.0, 10, 9.0, 2.0, 4, 6.0), _update(3.0, 30, 31.0, 6.0, 0, 0.0)]
    )
    assert out == pytest.approx(
        {
            "loss": 2.0,  # (1 + 3) / 2 updates
            "grad_norm": 4.0,
            "ratio_mean": 40.0 / 40,  # Σ ratio / Σ tokens, renamed
            "clip_high_frac": 8.0 / 40,
            "kl": 1.0 / 40,
            "is_weight@guided": 6.0 / 4,  # over the subset's 4 tokens only
        }
    )
    assert "is_weight@scaffold" not in out  # no token of that subset this step


def test_a_step_without_loss_tokens_divides_by_one_and_logs_no_fraction_of_nothing():
    out = reduce_update_metrics([{"value_loss": 0.25, "token_sums": {"tokens": 0.0}}])
    assert out == {"value_loss": 0.25}
