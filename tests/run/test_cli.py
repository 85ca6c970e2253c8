"""What the command line says: config errors as one line + exit 2, --help, a finished run's
summary ("already finished at step N") without running it again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_jax.run.cli_errors import describe
from rlvr_jax.run.report import run_summary
from rlvr_jax.run.run_io import finished_step

ROOT = Path(__file__).resolve().parents[2]
PULSE = f"--config={ROOT}/experiments/baselines/grpo.py:pulse"


def _main(tmp_path, *flags):
    cmd = [sys.executable, "-m", "rlvr_jax.main", PULSE, f"--workdir={tmp_path / 'w'}", *flags]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_mistyped_field_is_one_line_and_exit_2(tmp_path):
    out = _main(tmp_path, "--config.optimizer.lrr=1")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "error: --config.optimizer.lrr=1: config.optimizer has no field 'lrr'; did you mean "
        "'lr'? (--debug shows the traceback)"
    ]
    assert not (tmp_path / "w").exists()
    debug = _main(tmp_path, "--config.optimizer.lrr=1", "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_invalid_value_is_one_line_and_exit_2(tmp_path):
    out = _main(tmp_path, "--config.optimizer.lr=-1")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "error: config.optimizer.lr = -1.0; must be > 0 (--debug shows the traceback)"
    )
    assert not (tmp_path / "w").exists()  # refused before the workdir is made


def test_help_exits_0_and_says_where_fields_are_documented():
    out = subprocess.run([sys.executable, "-m", "rlvr_jax.main", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0
    text = out.stdout + out.stderr
    assert "rlvr_jax/rl/config.py" in text and "--config=FILE.py:VARIANT" in text
    assert "--rerun" in text and "--debug" in text


def test_describe_unwraps_ml_collections_key_errors():
    err = AttributeError(KeyError('\'lrr\'\nDid you mean "lr" instead of "lrr"?'))
    argv = ["main", "--config=x.py", "--config.optimizer.muon.lrr=1"]
    assert describe(err, argv) == (
        "--config.optimizer.muon.lrr=1: config.optimizer.muon has no field 'lrr'; "
        "did you mean 'lr'?"
    )
    assert describe(AttributeError(KeyError("'foo'")), ["m", "--config.foo.x=1"]) == (
        "--config.foo.x=1: config has no field 'foo'"
    )
    assert describe(ValueError("a\n  b"), []) == "a b"


def _finished_workdir(path: Path):
    """A workdir as a finished pulse leaves it (files only: config, checkpoint 2, outputs)."""
    from rlvr_jax import pyfile

    c = pyfile.load(ROOT / "experiments" / "baselines" / "grpo.py").get_config("pulse")
    path.mkdir()
    (path / "config.json").write_text(c.to_json())
    (path / "checkpoints" / "2").mkdir(parents=True)
    (path / "export").mkdir()
    (path / "export" / "config.json").write_text("{}")
    (path / "results.md").write_text("# Results\n")
    records = [
        {"step": 0, "split": "eval", "time": 0.0, "pass@1": 0.25, "pass@2": 0.5},
        {"step": 1, "split": "train", "time": 1.0, "reward": 0.1},
        {"step": 2, "split": "eval", "time": 2.0, "pass@1": 0.375, "pass@2": 0.5},
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return c


def test_finished_step_and_summary(tmp_path):
    c = _finished_workdir(tmp_path / "w")
    assert finished_step(tmp_path / "w", c) == 2
    text = run_summary(tmp_path / "w")
    assert text.splitlines()[:3] == [
        f"{tmp_path / 'w'}: finished at step 2",
        "  pass@1: 25.0% → 37.5% (+12.5)",
        "  pass@2: 50.0% → 50.0% (+0.0)",
    ]
    assert f"results.md     {tmp_path / 'w' / 'results.md'}" in text
    assert f"export/        {tmp_path / 'w' / 'export'}" in text
    assert "curves.png" not in text  # only outputs that exist are listed
    longer = c.copy_and_resolve_references()
    with longer.unlocked():
        longer.train.steps = 4
    assert finished_step(tmp_path / "w", longer) is None  # more steps: a resume
    (tmp_path / "w" / "results.md").unlink()
    assert finished_step(tmp_path / "w", c) is None  # killed before the outputs: rerun


@pytest.mark.parametrize("rerun", [False, True])
def test_main_on_a_finished_run_does_not_run_it_unless_asked(tmp_path, monkeypatch, capsys, rerun):
    from rlvr_jax import main as main_lib
    from rlvr_jax.rl import trainer

    _finished_workdir(tmp_path / "w")
    calls = []
    monkeypatch.setattr(trainer, "train", lambda *a, **k: calls.append(a) or {"pass@1": 0.5})
    argv = ["main", PULSE, f"--workdir={tmp_path / 'w'}"] + (["--rerun"] if rerun else [])
    main_lib.flags.FLAGS.unparse_flags()
    main_lib.flags.FLAGS(argv)
    try:
        main_lib.main([])
    finally:
        main_lib.flags.FLAGS.unparse_flags()
    out = capsys.readouterr()
    assert len(calls) == int(rerun)
    if rerun:
        assert json.loads(out.out) == {"pass@1": 0.5}
        assert "finished at step 2" in out.err and "already" not in out.err
    else:
        assert json.loads(out.out) == {"pass@1": 0.375, "pass@2": 0.5}  # the last eval
        assert f"{tmp_path / 'w'}: already finished at step 2" in out.err
        assert "pass@1: 25.0% → 37.5%" in out.err
