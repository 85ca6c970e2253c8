"""The rollout benchmark's workload, and the accelerator check run end to end at its tiny size."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import bench_rollout  # noqa: E402


def test_the_long_tail_has_the_stated_shape():
    """Median m, p99 ≈ 8m, capped at 8m; prompts within their bounds; uniform = the mean."""
    w = bench_rollout.make_workload(512, 400, 8, 64, 512, 32, "longtail", seed=1)
    assert w.rows == 3200 and len(w.prompts) == 400
    assert all(64 <= len(p) <= 512 and min(p) >= 3 and max(p) < 512 for p in w.prompts)
    assert abs(np.median(w.lengths) - 32) <= 2
    assert w.longest == 256 and np.mean(w.lengths == 256) < 0.03  # ~1% capped
    assert 200 <= np.percentile(w.lengths, 98.5) <= 256
    assert w.necessary == sum(map(len, w.prompts)) + w.lengths.sum()
    u = bench_rollout.make_workload(512, 4, 8, 64, 512, 32, "uniform")
    assert set(u.lengths) == {round(32 * np.exp(bench_rollout.SIGMA**2 / 2))}
    with pytest.raises(ValueError, match="--lengths 'flat'"):
        bench_rollout.make_workload(512, 4, 8, 64, 512, 32, "flat")


@pytest.mark.slow  # about 40 s: two rollout engines and 3 GRPO steps of the tiny model
def test_accelerator_check_runs_at_its_tiny_size(tmp_path):
    out = tmp_path / "check.json"
    subprocess.run(
        [sys.executable, str(SCRIPTS / "accelerator_check.py"), "--size", "tiny", "--out", out],
        check=True,
        capture_output=True,
        timeout=900,
    )
    r = json.loads(out.read_text())
    assert r["platform"] == "cpu" and r["size"] == "tiny"
    for engine in ("paged", "static"):
        assert r["rollout"][engine]["tokens_per_s"] > 0
    assert r["rollout"]["rows"] == 16 and r["rollout"]["tokens"] >= 16
    assert 0 < r["grpo"]["step_s"] and 0 < r["grpo"]["update_mfu"] < 1
    assert r["peak_memory_bytes"] > 0


def test_the_eval_suite_benchmark_file_is_a_math500_file_the_loader_reads(tmp_path):
    """bench_eval_suite's synthetic problems load as MATH-500 and their answers verify."""
    import bench_eval_suite

    from rlvr_jax.eval import Settings
    from rlvr_jax.eval.prompts import get_suite
    from rlvr_jax.eval.runner import load_suite_items
    from rlvr_jax.eval.scoring import score_math

    bench_eval_suite.write_math500(tmp_path, 5)
    loaded, missing = load_suite_items(get_suite("math"), tmp_path, Settings())
    assert [b.name for b, _, _ in loaded] == ["math500"] and "aime24" in missing
    items = loaded[0][1]
    assert len(items) == 5 and items[2].id == "test/prealgebra/2.json"
    a, b = 3 + 7 * 2 % 50, 11 + 5 * 2 % 40
    assert f"{a} + {b}" in items[2].body
    right, wrong = score_math(items[2], [f"so \\boxed{{{a + 2 * b}}}", "\\boxed{0}"])
    assert right.correct and not wrong.correct
