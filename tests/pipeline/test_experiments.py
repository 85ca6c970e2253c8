"""The pipeline experiments: every variant validates; each pulse runs and shows its method.

The slow pulses run a whole pipeline on a tiny random model (arithmetic prompts)
and check the quantity that makes each method what it is: the OPD stage moves
the weights where every reward is 0 (a GRPO stage cannot) and hands over to RL
at the switch; SFT trains on a teacher's verified samples; DPO builds pairs and
updates on them; merges are the task-vector sums; Mix RL reports per-domain
metrics; MOPD distils from the domain specialists; RSTG's SFT keeps only the
prompts the policy fails.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlvr_jax.pipeline import sft as sft_lib
from rlvr_jax.pipeline.config import is_pipeline, stage_names, validate
from rlvr_jax.pipeline.merge import model_tensors
from rlvr_jax.pipeline.run import evaluation_table, run

from ..rl.test_trainer import _parity_rewards

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "seq_opd_rl/pipeline": [
        f"{arm},{scale}" if scale else arm
        for arm in ("sequential", "joint_additive", "joint_rescale", "sft_rl", "opd", "rl", "all")
        for scale in ("", "cpu", "pulse")
    ],
    "fusion/fusion": ["", "cpu", "pulse"],
    "dpo/dpo": ["", "cpu", "pulse", "staged", "staged,cpu", "staged,pulse"],
    "rstg/rstg_sft": ["", "cpu", "pulse"],
}


def load(name: str, variant: str = ""):
    spec = importlib.util.spec_from_file_location(
        name.replace("/", "."), ROOT / "experiments" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_validates(name):
    for variant in VARIANTS[name]:
        c = load(name, variant)
        assert is_pipeline(c) and c.is_locked
        validate(c)
    with pytest.raises(ValueError, match="variant"):
        load(name, "nosuch")


def _lines(path, split):
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return [r for r in rows if r["split"] == split]


def _stage(workdir, name):
    return json.loads((Path(workdir) / "stages" / name / "stage.json").read_text())


def _parity_verified(monkeypatch):
    """A random model never solves a task: SFT data and the all-wrong filter count the
    even-length responses as correct instead, so the teacher and filter paths really run."""
    original = sft_lib.sample_verified

    def sample_verified(*args, **kwargs):
        return [[(t, len(t) % 2 == 0) for t, _ in s] for s in original(*args, **kwargs)]

    monkeypatch.setattr(sft_lib, "sample_verified", sample_verified)


@pytest.mark.slow
def test_seq_opd_rl_sequential_pulse_switches_in_run_and_hands_over(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "rlvr_jax.main",
        "--config=experiments/seq_opd_rl/pipeline.py:sequential,pulse",
        f"--workdir={tmp_path}",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout[out.stdout.index("{") :])
    assert set(result["stages"]) == {"opd", "rl"}
    # δ = 1, k = 2: evaluations at steps 0, 1, 2 -> switch after step 2 of at most 3.
    opd = _stage(tmp_path, "opd")
    assert opd["switched"] and opd["steps"] == 2 and opd["max_steps"] == 3
    train = _lines(tmp_path / "stages" / "opd" / "metrics.jsonl", "train")
    assert [x["step"] for x in train] == [1, 2]
    # Every reward is 0, yet OPD moves the weights (ℓ^T − ℓ^S); GRPO after it cannot.
    assert all(x["pass_rate"] == 0 and x["grad_norm"] > 0 for x in train)
    rl_train = _lines(tmp_path / "stages" / "rl" / "metrics.jsonl", "train")
    assert [x["grad_norm"] for x in rl_train] == [0.0, 0.0]
    rl_cfg = json.loads((tmp_path / "stages" / "rl" / "config.json").read_text())
    assert rl_cfg["model"]["path"] == str(tmp_path / "stages" / "opd" / "export")
    for model in ("base", "opd", "rl"):
        res = json.loads((tmp_path / "eval" / f"{model}.json").read_text())["results"]
        assert len(res["arithmetic"]["passk"]) == 4  # pass@k, k = 1..n = 4
    assert (tmp_path / "passk.png").read_bytes()[:4] == b"\x89PNG"
    assert "switched at step 2/3" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_dpo_staged_pulse_pairs_and_updates(tmp_path, monkeypatch):
    _parity_verified(monkeypatch)
    _parity_rewards(monkeypatch)
    c = load("dpo/dpo", "staged,pulse")
    result = run(c, tmp_path)
    assert list(result["stages"]) == ["sft", "dpo", "rl"]
    sft = _stage(tmp_path, "sft")["result"]
    assert sft["data_examples"] > 0 and sft["steps"] == 2  # the teacher's "correct" samples
    assert _lines(tmp_path / "stages" / "sft" / "metrics.jsonl", "train")[0]["loss"] > 0
    train = _lines(tmp_path / "stages" / "dpo" / "metrics.jsonl", "train")
    assert all(x["pairs"] > 0 and x["grad_norm"] > 0 and np.isfinite(x["loss"]) for x in train)
    assert all(0 <= x["dpo_accuracy"] <= 1 for x in train)
    # The first update starts at π_ref: every margin is 0 and the loss is log 2.
    assert train[0]["dpo_margin"] == pytest.approx(0.0, abs=1e-4)
    assert train[0]["loss"] == pytest.approx(np.log(2), abs=1e-4)
    assert train[1]["dpo_margin"] != pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_fusion_pulse_merges_mixes_and_routes(tmp_path, monkeypatch):
    _parity_rewards(monkeypatch)  # so that the specialists move away from θ_0
    c = load("fusion/fusion", "pulse")
    result = run(c, tmp_path)
    names = stage_names(c)
    assert list(result["stages"]) == names
    assert set(result["eval"]) == {"base", *names}
    assert all(set(r) == {"countdown", "arithmetic"} for r in result["eval"].values())

    def tensors(stage):
        from rlvr_jax.models import load_pretrained

        return model_tensors(load_pretrained(tmp_path / "stages" / stage / "export")[0])

    base, a, b = tensors("base_sft"), tensors("rl_countdown"), tensors("rl_arithmetic")
    assert max(np.abs(a[k] - base[k]).max() for k in base) > 1e-4
    assert max(np.abs(b[k] - base[k]).max() for k in base) > 1e-4
    for stage, lam in (("merge_sum", 1.0), ("merge_avg", 0.5)):
        m = tensors(stage)
        for k in base:
            want = base[k] + lam * (a[k] - base[k]) + lam * (b[k] - base[k])
            np.testing.assert_allclose(m[k], want, atol=1e-6)
    mix_eval = _lines(tmp_path / "stages" / "mix" / "metrics.jsonl", "eval")[-1]
    assert {"pass@1/countdown", "pass@1/arithmetic"} <= set(mix_eval)
    mopd_cfg = json.loads((tmp_path / "stages" / "mopd" / "config.json").read_text())
    teachers = json.loads(mopd_cfg["score"]["mopd"]["teachers"])
    assert teachers["countdown"]["path"] == str(tmp_path / "stages" / "rl_countdown" / "export")
    mopd_train = _lines(tmp_path / "stages" / "mopd" / "metrics.jsonl", "train")
    assert len(mopd_train) == 2 and all(x["grad_norm"] > 0 for x in mopd_train)
    for d in ("countdown", "arithmetic"):  # each expert's teacher-noise statistics
        assert all(0.0 <= x[f"mopd/{d}/noise_frac"] <= 1.0 for x in mopd_train)
    for table in ((tmp_path / "results.md").read_text(), evaluation_table(tmp_path)):
        for model in ("base", *names):
            assert f"| {model} |" in table


@pytest.mark.slow
def test_rstg_sft_pulse_trains_on_the_teachers_answers_to_failed_prompts(tmp_path, monkeypatch):
    _parity_verified(monkeypatch)
    c = load("rstg/rstg_sft", "pulse")
    run(c, tmp_path)
    for r in (1, 2):
        stats = json.loads((tmp_path / "stages" / f"sft_{r}" / "sft_data.json").read_text())
        assert 0 < stats["all_wrong_problems"] < stats["problems"] == 16
        assert stats["examples"] > 0
        rows = (tmp_path / "stages" / f"sft_{r}" / "sft_data.jsonl").read_text().splitlines()
        assert all(len(json.loads(x)["completion"]) % 2 == 0 for x in rows)  # "correct" ones
        rl = json.loads((tmp_path / "stages" / f"rstg_{r}" / "config.json").read_text())
        assert rl["credit"]["transforms"] == "rstg"
        assert rl["model"]["path"] == str(tmp_path / "stages" / f"sft_{r}" / "export")
