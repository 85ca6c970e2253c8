"""scripts/evaluate.py on a run reproduces the run's own evaluation: same settings (read
from its config.json), same function, same numbers as its results.md."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from rlvr_jax import pyfile, tasks
from rlvr_jax.models import init_model, save_pretrained
from rlvr_jax.rollout import score
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import tiny_config
from rlvr_jax.tokenizers import encode_prompt
from rlvr_jax.train.eval_checkpoint import (
    evaluate_run,
    format_settings,
    model_digest,
    run_eval_settings,
)
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.warmstart import default_tokenizer, save_tokenizer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "evaluate.py"


def _pulse_config():
    return pyfile.load(ROOT / "experiments" / "baselines" / "grpo.py").get_config("pulse")


def test_run_eval_settings_are_the_trainers():
    c = json.loads(_pulse_config().to_json())
    c["seed"], c["rollout"]["max_new_tokens"] = 7, 12
    assert run_eval_settings(c) == dict(split="test", num_problems=4, n_samples=2,
                                        temperature=1.0, max_new_tokens=12, seed=8)  # fmt: skip
    line = format_settings(run_eval_settings(c) | {"model_digest": "sha256:ab"})
    assert line == ("4 problems (test split) x 2 samples, temperature 1, at most 12 new "
                    "tokens, seed 8, model sha256:ab")  # fmt: skip


def test_evaluate_run_uses_the_runs_settings_on_its_export(tmp_path):
    """A run dir (config.json + export/) evaluates as the in-memory policy with the run's
    settings; the digest names the weights."""
    c = _pulse_config()
    tok = default_tokenizer()
    model = init_model(tiny_config(vocab_size=tok.vocab_size, eos_token_id=tok.eos_id), seed=0)
    (tmp_path / "export").mkdir()
    save_pretrained(model, model.config, tmp_path / "export")
    save_tokenizer(tok, tmp_path / "export")
    (tmp_path / "config.json").write_text(c.to_json())
    got = evaluate_run(tmp_path)
    settings = run_eval_settings(json.loads(c.to_json()))
    want = evaluate_task(model, tok, tasks.get("arithmetic"), **settings)
    for key in ("num_correct", "reasons", "mean_response_tokens", "pass@1", "pass@2"):
        assert got[key] == want[key], key
    assert got["example"]["response"] == want["example"]["response"]  # the same samples
    digest = model_digest(tmp_path / "export")
    assert got["settings"] == settings | {"model_digest": digest}
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", digest)
    with pytest.raises(ValueError, match="unknown evaluation settings"):
        evaluate_run(tmp_path, samples=3)


def test_a_paged_run_evaluates_on_its_engine(tmp_path):
    """rollout.engine = paged puts the run's engine into the settings; the evaluation
    (in the trainer and from the export) samples with it, row for row as the engine."""
    c = _pulse_config()
    c.rollout.engine, c.rollout.decode_slots, c.rollout.page_size = "paged", 8, 4
    settings = run_eval_settings(json.loads(c.to_json()))
    assert settings["sampler"] == dict(
        engine="paged", page_size=4, decode_slots=8, prefill_chunk=64, paged_kernel="jax",
        paged_block_pages=2, cache_bytes=None, cache_dtype=None,
    )  # fmt: skip
    assert "paged engine (4-token pages, 8 slots)" in format_settings(settings)
    assert "sampler" not in run_eval_settings(json.loads(_pulse_config().to_json()))
    tok = default_tokenizer()
    model = init_model(tiny_config(vocab_size=tok.vocab_size, eos_token_id=tok.eos_id), seed=0)
    task = tasks.get("arithmetic")
    got = evaluate_task(model, tok, task, **settings)
    # The same rows straight from a paged Sampler: evaluate_task's one call (4 prompts).
    sampler = Sampler(model, pad_id=tok.pad_id, **settings["sampler"])
    problems = task.problems(settings["num_problems"], settings["split"])
    params = SamplingParams(
        temperature=1.0, max_new_tokens=settings["max_new_tokens"],
        stop_token_ids=tok.stop_ids, n=settings["n_samples"],
    )  # fmt: skip
    key = jax.random.fold_in(jax.random.PRNGKey(settings["seed"]), 0)
    rollout = sampler.sample([encode_prompt(tok, p.prompt) for p in problems], params, key)
    rows = range(len(problems) * settings["n_samples"])
    v = score.score_rows(
        task, tok, [problems[b // settings["n_samples"]] for b in rows],
        [rollout.sampled_tokens(b) for b in rows], tok.stop_ids,
    )  # fmt: skip
    assert got["mean_response_tokens"] == pytest.approx(float(rollout.response_mask.sum(-1).mean()))
    assert got["example"]["response"] == v.texts[0]
    (tmp_path / "export").mkdir()
    save_pretrained(model, model.config, tmp_path / "export")
    save_tokenizer(tok, tmp_path / "export")
    (tmp_path / "config.json").write_text(c.to_json())
    again = evaluate_run(tmp_path)  # from the export: the same engine, the same samples
    assert again["settings"]["sampler"] == settings["sampler"]
    assert again["num_correct"] == got["num_correct"]
    assert again["example"]["response"] == got["example"]["response"]


def _after_row(results_md: str) -> dict[str, str]:
    lines = [x for x in results_md.splitlines() if x.startswith("|")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    after = [x for x in lines if "(after)" in x][0]
    return dict(zip(header, [v.strip() for v in after.strip("|").split("|")], strict=True))


@pytest.mark.slow
def test_script_on_a_pulse_run_reproduces_its_results_md(tmp_path, monkeypatch, capsys):
    work = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr_jax.main",
           f"--config={ROOT}/experiments/baselines/grpo.py:pulse", f"--workdir={work}",
           "--config.eval.num_problems=8", "--config.rollout.max_new_tokens=24"]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    final = json.loads(out.stdout[out.stdout.index("{") :])
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(work), "--output", str(tmp_path / "e.json")])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    printed = capsys.readouterr().out
    got = json.loads((tmp_path / "e.json").read_text())
    for key in ("pass@1", "pass@2", "avg@2", "mean_reward", "mean_response_tokens"):
        assert got[key] == final[key], key  # exactly: the same samples
    row = _after_row((work / "results.md").read_text())
    assert row["pass@1 (%)"] == f"{100 * got['pass@1']:.1f}"
    assert row["response tokens"] == f"{got['mean_response_tokens']:.1f}"
    line = format_settings(got["settings"])
    assert f"settings: {line}" in printed
    results = (work / "results.md").read_text()
    run_settings = run_eval_settings(json.loads((work / "config.json").read_text()))
    assert format_settings(run_settings) in results  # the line of results.md's rows
    assert got["settings"]["model_digest"] in results  # results.md names the same weights
    assert "8 problems (test split) x 2 samples" in results and "at most 24 new tokens" in results
