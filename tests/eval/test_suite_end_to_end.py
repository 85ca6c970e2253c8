"""scripts/eval_suite.py on the fixture files with tiny random models, resume from the cache,
and the metrics of whole suites under a scripted policy whose right answers are known."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from rlvr_jax.eval import CodeScorer, Settings, evaluate_models, get_suite, run_suite
from rlvr_jax.eval import runner as runner_module
from rlvr_jax.eval.prompts import render
from rlvr_jax.models import init_model, save_pretrained
from rlvr_jax.testing import tiny_config
from rlvr_jax.tokenizers import SentencePieceTokenizer, encode_prompt
from rlvr_jax.train.warmstart import save_tokenizer
from tests.eval.fake_sandbox import FakeSandbox, fence

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "eval" / "fixtures" / "data"
SCRIPT = ROOT / "scripts" / "eval_suite.py"
SP_MODEL = ROOT / "rlvr_jax" / "assets" / "rlvr_tasks_sp.model"
MATH = ("AIME24", "AIME25", "AMC23", "MATH-500", "Minerva", "OlympiadBench")


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer(SP_MODEL)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer):
    """Two tiny random Qwen3 directories (different seeds) with the shipped tokenizer."""
    root = tmp_path_factory.mktemp("models")
    out = []
    for seed, name in ((0, "policy_a"), (1, "policy_b")):
        path = root / name
        path.mkdir()
        config = tiny_config(vocab_size=tokenizer.vocab_size, eos_token_id=tokenizer.eos_id)
        save_pretrained(init_model(config, seed=seed), config, path)
        save_tokenizer(tokenizer, path)
        out.append(path)
    return out


_FLAGS = ["--suite", "math", "--data", str(DATA), "--num-problems", "2", "--n-samples", "2",
          "--k", "1,2", "--max-new-tokens", "16", "--seed", "3"]  # fmt: skip


def test_script_prints_one_table_for_two_models_and_resumes_from_its_cache(
    models, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out"
    argv = ["eval_suite.py", "--model", str(models[0]), "--model", str(models[1]), *_FLAGS]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    printed = capsys.readouterr().out
    assert "| Model | " + " | ".join(MATH) + " | Avg. |" in printed
    for metric in ("avg@2", "pass@1", "pass@2", "maj@1", "maj@2"):
        assert f"**{metric}**" in printed
    assert printed.count("| policy_a |") == 5 and printed.count("| policy_b |") == 5

    full = json.loads((out / "results.json").read_text())
    assert [m["label"] for m in full["models"]] == ["policy_a", "policy_b"]
    s = full["settings"]
    assert (s["n_samples"], s["max_new_tokens"], s["seed"], s["temperature"]) == (2, 16, 3, 0.6)
    assert "Please reason step by step" in s["template"]
    for m in full["models"]:
        for b in m["result"]["benchmarks"].values():
            assert b["num_problems"] == 2 and all(len(p["statuses"]) == 2 for p in b["problems"])
            mean_c = sum(p["num_correct"] for p in b["problems"]) / 4
            assert b["metrics"]["avg@2"]["value"] == pytest.approx(mean_c)
    assert (out / "pass_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "table.md").read_text() == full["table"]
    # The two policies differ, so their samples (and cache files) do.
    a, b = (m["result"]["benchmarks"]["math500"]["problems"][0]["example"] for m in full["models"])
    assert a != b and len(list((out / "cache").iterdir())) == 2

    # Resume: everything is cached, so nothing is sampled again and the numbers agree.
    def no_sampling(*args, **kw):
        raise AssertionError("sampled although every problem is cached")

    monkeypatch.setattr(runner_module, "sampler_generate", no_sampling)
    monkeypatch.setattr(runner_module, "engine_generate", no_sampling)
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    again = json.loads((out / "results.json").read_text())
    assert again["models"][0]["result"] == full["models"][0]["result"]
    assert capsys.readouterr().out == printed


def test_a_stopped_run_resumes_to_the_uninterrupted_samples(models, tmp_path):
    """num_problems=1, then 2 in the same out dir = a run over 2 from the start."""
    settings = dict(n_samples=2, ks=(1,), max_new_tokens=16, seed=3, benchmarks=("math500",))
    one = evaluate_models(models[:1], "math", DATA, Settings(num_problems=1, **settings),
                          tmp_path / "r", show_progress=False)  # fmt: skip
    two = evaluate_models(models[:1], "math", DATA, Settings(num_problems=2, **settings),
                          tmp_path / "r", show_progress=False)  # fmt: skip
    fresh = evaluate_models(models[:1], "math", DATA, Settings(num_problems=2, **settings),
                            tmp_path / "fresh", show_progress=False)  # fmt: skip
    get = lambda r: r["models"][0]["result"]["benchmarks"]["math500"]["problems"]  # noqa: E731
    assert get(one)[0] == get(two)[0] == get(fresh)[0]
    assert get(two) == get(fresh)
    lines = (tmp_path / "r" / "cache").glob("*/math500.jsonl")
    assert sum(len(p.read_text().splitlines()) for p in lines) == 2  # no problem sampled twice


def test_batching_changes_no_sample_and_the_engine_is_part_of_the_cache_key(models, tmp_path):
    """The paged engine keys rows by problem: 1 or 3 problems per call give the same samples.
    The static sampler (one call per problem) gives its own, cached under other keys."""
    settings = dict(n_samples=2, ks=(1,), max_new_tokens=12, seed=5, benchmarks=("math500",),
                    num_problems=3, temperature=1.0)  # fmt: skip
    get = lambda r: r["models"][0]["result"]["benchmarks"]["math500"]["problems"]  # noqa: E731
    runs = {}
    for name, extra in (("one", dict(prompts_per_batch=1)), ("three", dict(prompts_per_batch=3)),
                        ("static", dict(engine="static"))):  # fmt: skip
        runs[name] = get(evaluate_models(models[:1], "math", DATA, Settings(**settings, **extra),
                                         tmp_path / name, show_progress=False))  # fmt: skip
    assert runs["one"] == runs["three"] and len(runs["one"]) == 3
    assert [p["example"] for p in runs["static"]] != [p["example"] for p in runs["one"]]
    # One output directory for both engines: the static run samples again, nothing is mixed.
    shared = tmp_path / "shared"
    for extra in (dict(), dict(engine="static")):
        evaluate_models(models[:1], "math", DATA, Settings(**settings, **extra), shared,
                        show_progress=False)  # fmt: skip
    lines = (shared / "cache").glob("*/math500.jsonl")
    assert sum(len(p.read_text().splitlines()) for p in lines) == 6
    with pytest.raises(ValueError, match="engine must be"):
        Settings(engine="vllm")


def _scripted(tokenizer, suite, data, answer_of, wrong):
    """A policy that answers each problem right once and wrong once (prompt -> 2 responses)."""
    items = {}
    for b in suite.benchmarks:
        for item in b.load(data)[0]:
            items[tuple(encode_prompt(tokenizer, render(suite.template, item.body)))] = item

    def generate(ids, key):
        item = items[tuple(ids)]
        return [answer_of(item), wrong(item)]

    return generate


def test_math_and_science_metrics_under_a_policy_right_half_the_time(tokenizer):
    settings = Settings(n_samples=2, ks=(1, 2), seed=0)
    math = get_suite("math")
    gen = _scripted(
        tokenizer, math, DATA, lambda i: f"so \\boxed{{{i.answer}}}", lambda i: "\\boxed{-999}"
    )
    res = run_suite(None, tokenizer, math, DATA, settings, generate=gen, show_progress=False)
    for name, b in res["benchmarks"].items():
        m = b["metrics"]
        assert m["avg@2"]["value"] == pytest.approx(0.5), name
        assert m["pass@1"]["value"] == pytest.approx(0.5) and m["pass@2"]["value"] == 1.0
        assert m["maj@2"]["value"] == 1.0  # a 1-1 tie goes to the earlier (right) answer
        assert m["avg@2"]["se"] == 0.0
    assert res["average"]["pass@2"]["value"] == 1.0

    science = get_suite("science")
    gen = _scripted(tokenizer, science, DATA, lambda i: f"Answer: {i.answer}",
                    lambda i: "\\boxed{" + ("B" if i.answer == "A" else "A") + "}")  # fmt: skip
    res = run_suite(None, tokenizer, science, DATA, settings, generate=gen, show_progress=False)
    assert res["benchmarks"]["gpqa_diamond"]["metrics"]["pass@1"]["value"] == pytest.approx(0.5)
    assert res["benchmarks"]["mmlu_pro"]["metrics"]["pass@2"]["value"] == 1.0


def _real_sandbox():
    from rlvr_jax import sandbox

    sandbox.check_available()  # CI installs bubblewrap (.ci/run): isolation must be there
    return sandbox


@pytest.mark.parametrize("which", ["stand-in", "real"])
def test_code_suite_full_and_average_test_pass_rate_through_the_sandbox(tokenizer, which):
    """Right programs once per problem; the second response passes the public tests only
    (LiveCodeBench) or nothing."""
    sandbox = FakeSandbox if which == "stand-in" else _real_sandbox()
    code = get_suite("code")
    right = {
        "fix_a": "a, b = map(int, input().split())\nprint(a + b)\n",
        "fix_b": "class Solution:\n    def double(self, x):\n        return 2 * x\n",
        "HumanEval/900": "def add(a, b):\n    return a + b\n",
        "HumanEval/901": "def is_even(n):\n    return n % 2 == 0\n",
        "9001": "def square(x):\n    return x * x\n",
        "9002": "def root(x):\n    return math.sqrt(x)\n",
    }
    half = {
        "fix_a": "print(3)\n",
        "fix_b": "class Solution:\n    def double(self, x):\n        return 6\n",
    }
    gen = _scripted(tokenizer, code, DATA, lambda i: fence(right[i.id]),
                    lambda i: fence(half.get(i.id, "raise SystemExit(1)\n")))  # fmt: skip
    settings = Settings(n_samples=2, ks=(1, 2))
    res = run_suite(None, tokenizer, code, DATA, settings, generate=gen, show_progress=False,
                    code_scorer=CodeScorer(2, sandbox=sandbox))  # fmt: skip
    lcb = res["benchmarks"]["livecodebench"]["metrics"]
    assert lcb["pass@1"]["value"] == pytest.approx(0.5) and lcb["pass@2"]["value"] == 1.0
    # fix_a: (1 + 1/2) / 2; fix_b: (1 + 1/2) / 2 (its "return 6" passes the input 3 only)
    assert lcb["test_pass_rate"]["value"] == pytest.approx(0.75)
    he = res["benchmarks"]["humanevalplus"]["metrics"]
    assert he["test_pass_rate"]["value"] == pytest.approx(0.5) and "maj@1" not in he
