"""analyze_entrance end to end on a tiny policy that memorised a few Countdown solutions."""

import json

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.analysis.entrance import EntranceOptions, analyze_entrance
from rlvr_jax.analysis.intervention import entrance_intervention
from rlvr_jax.models import save_pretrained
from rlvr_jax.rl.build import build_policy
from rlvr_jax.rl.config import default_config
from rlvr_jax.train.sft import train_sft
from rlvr_jax.train.warmstart import TASK_OPTIONS, save_tokenizer

PROBLEMS = 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A fake RL run: config (random tiny initial policy), export = that policy after SFT."""
    path = tmp_path_factory.mktemp("ebl_run")
    c = default_config()
    c.model.source = "random"
    c.task.options = json.dumps(TASK_OPTIONS["countdown"])
    c.rollout.max_new_tokens = 32
    (path / "config.json").write_text(c.to_json())
    model, tok = build_policy(c)
    task = tasks.get("countdown", **TASK_OPTIONS["countdown"])
    examples = [(p.prompt, p.solution) for p in task.problems(PROBLEMS, "test")] * 4
    train_sft(model, tok, examples, steps=120, batch_size=8, lr=1e-2, log_every=60)
    save_pretrained(model, model.config, path / "export")
    save_tokenizer(tok, path / "export")
    return path


@pytest.mark.slow
def test_analyze_entrance_end_to_end(run_dir, tmp_path):
    o = EntranceOptions(
        num_problems=PROBLEMS, n_samples=4, layers="-1:", alphas=(0.0, 1.0), window=4
    )
    r = analyze_entrance(run_dir, "", tmp_path, o)
    assert {p.name for p in tmp_path.iterdir()} >= {
        "entrance.json",
        "entrance.md",
        "likelihood_shift.png",
        "interpolation.png",
    }
    base, rl = r["eval"]["base"], r["eval"]["rl"]
    assert rl["pass@1"] > base["pass@1"] and rl["coverage"] > 0
    assert 0 <= rl["entrance_entropy"] and rl["entrance_families"] >= 1
    shift = r["likelihood_shift"]
    assert shift["num_responses"] > 0 and np.isfinite(shift["pre"]) and shift["pre"] > 0
    # α = 0 is the RL policy: the same seed gives the same samples, so the same numbers.
    at0 = r["interpolation"]["sweep"][0]
    assert at0["alpha"] == 0 and at0["pass@1"] == rl["pass@1"] and at0["coverage"] == rl["coverage"]
    assert r["interpolation"]["layers"] == [1]
    iv = r["intervention"]["rl"]
    task = tasks.get("countdown", **TASK_OPTIONS["countdown"])
    families = sum(len(p.metadata["entrance_families"]) for p in task.problems(PROBLEMS, "test"))
    assert iv["summary"]["all"]["count"] == len(iv["families"]) == families
    assert "Likelihood shift" in (tmp_path / "entrance.md").read_text()


@pytest.mark.slow
def test_forced_prefix_starts_every_response(run_dir, monkeypatch):
    """The intervention's samples begin with the forced family's tokens."""
    from rlvr_jax.analysis import checkpoints, intervention

    model, tok = checkpoints.load_policy(run_dir)
    task = tasks.get("countdown", **TASK_OPTIONS["countdown"])
    seen = []
    original = intervention._sample

    def spy(*args, prefixes=None, **kw):
        out = original(*args, prefixes=prefixes, **kw)
        if prefixes is not None:
            seen.extend(zip([tok.decode(p) for p in prefixes], out, strict=True))
        return out

    monkeypatch.setattr(intervention, "_sample", spy)
    entrance_intervention(
        model, tok, task, task.problems(2, "test"), n_samples=2, max_new_tokens=24
    )
    assert seen
    for prefix, (texts, _) in seen:
        assert all(t.startswith(prefix) for t in texts), (prefix, texts)
