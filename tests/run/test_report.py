"""The results table and the curves PNG from metrics records."""

from __future__ import annotations

import io
import json
import re
import struct

import pytest

from rlvr_jax.run import report
from rlvr_jax.run.logger import MetricsLogger
from rlvr_jax.run.metrics_file import read_metrics
from rlvr_jax.run.report import plot_curves, results_table, write_report

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == _PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _records():
    recs = []
    for step in range(0, 21):
        recs.append(dict(step=step, split="train", reward=0.3 + step / 100, kl=step / 1000))
    recs += [
        {"step": 0, "split": "eval", "pass@1": 0.25, "pass@8": 0.6, "avg@8": 0.25,
         "mean_reward": 0.3125, "mean_response_tokens": 30.25},
        {"step": 10, "split": "eval", "pass@1": 0.5, "pass@8": 0.7, "avg@8": 0.5,
         "mean_reward": 0.5, "mean_response_tokens": 28.0},
        {"step": 20, "split": "eval", "pass@1": 0.3125, "pass@8": 0.75, "avg@8": 0.3125,
         "mean_reward": 0.4, "mean_response_tokens": 25.0},
        # Step 20 evaluated again (e.g. the final eval): the last record wins.
        {"step": 20, "split": "eval", "pass@1": 0.34375, "pass@8": 0.8, "avg@8": 0.34375,
         "mean_reward": 0.45, "mean_response_tokens": 26.5},
    ]  # fmt: skip
    return recs


def test_results_table_numbers():
    text = results_table(_records())
    want = (
        "| step | pass@1 (%) | pass@8 (%) | avg@8 (%) | mean reward | response tokens |\n"
        "|---|---|---|---|---|---|\n"
        "| 0 (before RL) | 25.0 | 60.0 | 25.0 | 0.312 | 30.2 |\n"
        "| 10 | 50.0 | 70.0 | 50.0 | 0.500 | 28.0 |\n"
        "| 20 (after) | 34.4 | 80.0 | 34.4 | 0.450 | 26.5 |\n"
        "\n"
        "pass@1: before 25.0% → after 34.4% (+9.4 points)\n"
        "pass@8: before 60.0% → after 80.0% (+20.0 points)\n"
    )
    assert text == want


def test_results_table_missing_values_and_single_row():
    recs = [
        {"step": 5, "split": "eval", "pass@1": 0.5, "pass@4": 0.75},
        {"step": 9, "split": "eval", "pass@1": 0.25, "pass@16": 0.5, "mean_reward": 0.2},
    ]
    lines = results_table(recs).splitlines()
    assert lines[0] == (
        "| step | pass@1 (%) | pass@4 (%) | pass@16 (%) | mean reward | response tokens |"
    )
    assert lines[2] == "| 5 | 50.0 | 75.0 | - | - | - |"  # not step 0: no "before RL"
    assert lines[3] == "| 9 (after) | 25.0 | - | 50.0 | 0.200 | - |"
    assert lines[5:] == ["pass@1: before 50.0% → after 25.0% (-25.0 points)"]
    one = results_table(recs[:1])
    assert "before" not in one and "after" not in one and "| 5 | 50.0 | 75.0 |" in one
    assert results_table([{"step": 0, "split": "train", "reward": 1.0}]) == "(no eval records)\n"


def test_plot_curves_writes_a_png(tmp_path):
    path = tmp_path / "curves.png"
    plot_curves(_records(), path)
    width, height = _png_size(path)
    # Four panels of 5 x 3.5 inches at 100 dpi, three per row: reward, eval pass@k, KL and
    # (eval) response length; no entropy panel.
    assert (width, height) == (1500, 700)


def test_plot_curves_skips_missing_series(tmp_path):
    only_len = [{"step": s, "split": "train", "response_len": 10 + s} for s in range(30)]
    plot_curves(only_len, tmp_path / "a.png")
    assert _png_size(tmp_path / "a.png") == (500, 350)  # one panel
    plot_curves([], tmp_path / "empty.png")
    assert _png_size(tmp_path / "empty.png") == (500, 350)


def test_write_report_from_a_logged_run(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, stream=io.StringIO()) as logger:
        for r in _records():
            metrics = {k: v for k, v in r.items() if k not in ("step", "split")}
            logger.log(r["step"], metrics, split=r["split"])
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == len(_records())
    results, curves = write_report(tmp_path)
    assert results == tmp_path / "results.md" and curves == tmp_path / "curves.png"
    text = results.read_text()
    assert text.startswith(f"# Results: {tmp_path.name}\n\n")
    assert text.endswith(results_table(_records()))
    assert curves.read_bytes()[:8] == _PNG_MAGIC
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "curves.png", "metrics.jsonl", "results.md",
    ]  # fmt: skip


def test_write_report_needs_metrics(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path))):
        write_report(tmp_path)


def _write_run(path, before, after, step_seconds):
    path.mkdir(parents=True)
    lines = [
        {"step": 0, "split": "eval", "time": 0, "pass@1": before[0], "pass@8": before[1]},
        {"step": 1, "split": "train", "time": 1, "step_seconds": step_seconds},
        {"step": 2, "split": "train", "time": 2, "step_seconds": step_seconds},
        {"step": 2, "split": "eval", "time": 3, "pass@1": after[0], "pass@8": after[1]},
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_comparison_table_means_and_spread_over_seeds(tmp_path):
    a = _write_run(tmp_path / "a0", (0.25, 0.70), (0.35, 0.60), 5.0)
    b = _write_run(tmp_path / "a1", (0.25, 0.70), (0.30, 0.66), 7.0)
    c = _write_run(tmp_path / "b0", (0.25, 0.70), (0.20, 0.70), 1.0)
    table = report.comparison_table({"grpo": [a, b], "rloo": [c]})
    lines = table.strip().splitlines()
    assert lines[0].startswith("| method | seeds | pass@1 before | pass@1 after | Δpass@1")
    # grpo: after pass@1 mean 32.5, gains +10 and +5 -> +7.5 (+5.0..+10.0); 2 steps x 6 s mean.
    assert lines[2] == (
        "| grpo | 2 | 25.0 | 32.5 | +7.5 (+5.0..+10.0) | 70.0 | 63.0 | -7.0 (-10.0..-4.0) | 12 |"
    )
    assert lines[3].startswith("| rloo | 1 | 25.0 | 20.0 | -5.0 (-5.0..-5.0) |")
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    (lonely / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "split": "eval", "time": 0, "pass@1": 0.1}) + "\n"
    )
    with pytest.raises(ValueError, match="needs an eval before and after training, found 1"):
        report.comparison_table({"x": [lonely]})


def _pulse_config() -> dict:
    from pathlib import Path

    from rlvr_jax import pyfile

    root = Path(__file__).resolve().parents[2]
    c = pyfile.load(root / "experiments" / "baselines" / "grpo.py").get_config("pulse")
    return json.loads(c.to_json())


def test_results_md_names_the_settings_and_the_weights(tmp_path):
    import hashlib

    config = _pulse_config()
    config["seed"] = 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    (tmp_path / "export").mkdir()
    weights = b"not really safetensors, but bytes to hash"
    (tmp_path / "export" / "model.safetensors").write_bytes(weights)
    text = write_report(tmp_path)[0].read_text()
    assert ("- every row: 4 problems (test split) x 2 samples, temperature 1, at most 16 new "
            "tokens, seed 5, task arithmetic") in text  # fmt: skip
    assert "- initial policy: random `tiny` model, seed 4" in text
    name = b"model.safetensors\0" + str(len(weights)).encode() + b"\0"
    digest = hashlib.sha256(name + weights).hexdigest()[:16]
    assert f"- final policy: `{tmp_path / 'export'}` (sha256:{digest})" in text


def test_curves_have_a_title_y_labels_and_no_empty_cells(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    records = _records() + [dict(step=s, split="train", pass_rate=0.3 + s / 100, entropy=1.0)
                            for s in range(1, 21)]  # fmt: skip
    title = report.curves_title("run", _pulse_config())
    assert title == "run: grpo / ppo_clip / uniform, seed 0, base random tiny, task arithmetic"
    plot_curves(records, tmp_path / "c.png", title)
    (fig,) = figures
    # 5 panels on a 3x2 grid: the sixth cell is removed, not left as an empty frame
    assert [ax.get_title() for ax in fig.axes] == [
        "train reward", "held-out pass@k", "KL to reference", "entropy",
        "response length (tokens)"]  # fmt: skip
    assert all(ax.get_ylabel() for ax in fig.axes)
    assert fig._suptitle.get_text() == title
    reward, pass_rate = [ln for ln in fig.axes[0].get_lines() if ln.get_label() in
                         ("reward", "pass rate")]  # fmt: skip
    assert (reward.get_linestyle(), pass_rate.get_linestyle()) == ("-", "--")
    plt.close(fig)


def test_report_of_an_sft_stage_run(tmp_path):
    """An SFT stage's config has a `model` block of execution fields only and no rollout."""
    from rlvr_jax.pipeline.execution import add_execution
    from rlvr_jax.pipeline.sft import sft_config

    config = json.loads(add_execution(sft_config()).to_json())
    assert "source" not in config["model"] and "rollout" not in config
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    text = write_report(tmp_path)[0].read_text()
    assert "## Evaluation" not in text
    title = report.curves_title("sft", config)
    assert "base" not in title and title.startswith("sft: ") and f"seed {config['seed']}" in title
