"""evaluate_model_dir on a tiny saved model, option parsing, the summary table and the script."""

from __future__ import annotations

import dataclasses
import json
import re
import runpy
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.models import init_model, save_pretrained
from rlvr_jax.tasks.base import CORRECT, WRONG_ANSWER, Problem, Verdict
from rlvr_jax.tasks.countdown import Countdown
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train.eval_checkpoint import (
    evaluate_model_dir,
    markdown_summary,
    parse_options,
    resolve_model_dir,
)
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.warmstart import save_tokenizer

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "evaluate.py"
# One sampling shape for every test here: the sampler compiles once per process.
_KW = dict(num_problems=5, n_samples=4, max_new_tokens=6, seed=3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(model directory, model, tokenizer) of a tiny random Qwen3 saved once per module."""
    path = tmp_path_factory.mktemp("tiny") / "model"
    path.mkdir()
    tok = toy_tokenizer(128)
    config = tiny_config(eos_token_id=tok.eos_id)
    model = init_model(config, seed=0)
    save_pretrained(model, config, path)
    save_tokenizer(tok, path)
    return path, model, tok


@dataclasses.dataclass(frozen=True)
class _EvenLengthCountdown(Countdown):
    """Countdown prompts (so the sampler's compiled shapes are reused), but a response is
    correct iff its length is even: a random model solves about half."""

    def verify(self, problem: Problem, response: str) -> Verdict:
        return Verdict(1.0, CORRECT) if len(response) % 2 == 0 else Verdict(0.0, WRONG_ANSWER)


def test_countdown_on_a_saved_tiny_model_matches_in_memory_evaluation(saved):
    path, model, tok = saved
    options = {"num_numbers": 3, "max_number": 10}
    out = evaluate_model_dir(path, "countdown", task_options=options, **_KW)
    want = evaluate_task(model, tok, tasks.get("countdown", **options), **_KW)
    assert out["num_correct"] == want["num_correct"]  # the saved policy is the same policy
    for key in ("pass@1", "pass@4", "mean_reward", "reasons", "mean_response_tokens"):
        assert out[key] == want[key], key
    assert out["avg@4"] == pytest.approx(np.mean(out["num_correct"]) / 4)
    assert out["model_dir"] == str(path) and out["task"] == "countdown"
    assert out["task_options"] == options and out["split"] == "test"
    assert out["num_problems"] == 5 and out["n_samples"] == 4
    assert sum(out["reasons"].values()) == 20


def test_avg_at_n_on_a_task_a_random_model_half_solves(saved, tmp_path, monkeypatch):
    shutil.copytree(saved[0], tmp_path / "run" / "export")  # a run workdir: policy in export/
    monkeypatch.setattr(tasks, "get", lambda name, **kw: _EvenLengthCountdown(**kw))
    out = evaluate_model_dir(tmp_path / "run", "even_length_countdown", **_KW)
    num_correct = np.asarray(out["num_correct"])
    assert 0 < num_correct.sum() < 20  # a non-trivial mix, so the average means something
    assert out["avg@4"] == pytest.approx(num_correct.mean() / 4)
    assert out["pass@1"] == pytest.approx(num_correct.mean() / 4)
    assert out["pass@4"] == pytest.approx((num_correct > 0).mean())
    assert out["model_dir"] == str(tmp_path / "run" / "export")


def test_missing_directory_and_missing_config_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope"))):
        resolve_model_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "empty")) + ".*config"):
        evaluate_model_dir(tmp_path / "empty", "countdown")


def test_parse_options():
    got = parse_options(["num_numbers=3", "operators=+-", "p=0.5", "flag=true", 's="x=y"'])
    assert got == {"num_numbers": 3, "operators": "+-", "p": 0.5, "flag": True, "s": "x=y"}
    assert parse_options(["empty="]) == {"empty": ""}
    with pytest.raises(ValueError, match="'num_numbers'"):
        parse_options(["num_numbers"])
    with pytest.raises(ValueError, match="'=3'"):
        parse_options(["=3"])


def test_markdown_summary():
    result = {"task": "countdown", "split": "test", "num_problems": 4, "n_samples": 8,
              "pass@1": 0.25, "pass@8": 0.5, "avg@8": 0.25, "mean_reward": 0.3125,
              "reasons": {"correct": 8, "wrong_answer": 24}}  # fmt: skip
    assert markdown_summary(result) == (
        "| task | split | problems x n | pass@1 | pass@8 | avg@8 | mean reward |\n"
        "|---|---|---|---|---|---|---|\n"
        "| countdown | test | 4 x 8 | 25.0% | 50.0% | 25.0% | 0.312 |\n"
        "\n"
        "reasons: correct 8, wrong_answer 24\n"
    )


def test_script_prints_the_table_and_writes_json(saved, tmp_path, monkeypatch, capsys):
    argv = [str(_SCRIPT), str(saved[0]), "--task", "countdown", "--option", "num_numbers=3",
            "--num-problems", "5", "--n-samples", "4", "--max-new-tokens", "6", "--seed", "3",
            "--output", str(tmp_path / "r.json")]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(_SCRIPT), run_name="__main__")
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["task_options"] == {"num_numbers": 3} and written["avg@4"] == written["pass@1"]
    assert "| countdown | test | 5 x 4 | " in printed and "reasons: " in printed
    monkeypatch.setattr(sys, "argv", [str(_SCRIPT), str(tmp_path / "none"), "--task", "countdown"])
    with pytest.raises(SystemExit, match=re.escape(str(tmp_path / "none"))):
        runpy.run_path(str(_SCRIPT), run_name="__main__")


def test_run_task_reads_the_runs_resolved_task(tmp_path):
    from rlvr_jax.rl.config import default_config
    from rlvr_jax.train.eval_checkpoint import run_task
    from rlvr_jax.train.warmstart import TASK_OPTIONS

    (tmp_path / "config.json").write_text(default_config().to_json())
    assert run_task(tmp_path) == ("countdown", TASK_OPTIONS["countdown"])
    c = default_config()
    c.task.name = "arithmetic"
    c.task.options = '{"num_operands": 4}'
    (tmp_path / "config.json").write_text(c.to_json())
    assert run_task(tmp_path) == ("arithmetic", {"num_operands": 4})
    (tmp_path / "config.json").write_text('{"model_type": "qwen3"}')  # an HF model dir
    assert run_task(tmp_path) is None
    assert run_task(tmp_path / "missing") is None
