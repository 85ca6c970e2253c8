"""The harness: arm sharing across pages, resume, crashes, config resolution."""

from __future__ import annotations

import json

import pytest
from absl import flags
from ml_collections import config_flags

from rlvr_jax.locking import FileLock
from rlvr_jax.repro import Arm, reproduce
from rlvr_jax.repro import runs as runs_lib
from tests.repro.conftest import pulse_repro


def _run(repro, tmp_path, fake, plot=False, **kw):
    return reproduce(
        repro,
        [0, 1],
        tmp_path / "root",
        launch=fake,
        docs=tmp_path / "docs",
        echo=lambda *_: None,
        plot=plot,
        **kw,
    )


def test_baseline_shared_across_pages_runs_once(tmp_path, fake):
    sara = pulse_repro("sara", "sara", "sara/sara.py")
    vigor = pulse_repro("vigor", "vigor", "vigor/vigor.py")
    _run(sara, tmp_path, fake)
    page = _run(vigor, tmp_path, fake, plot=True)
    assert page.with_suffix(".png").stat().st_size > 1000
    # Seed-major within a page; the second page reuses GRPO's runs.
    assert fake.calls == [
        ("grpo", 0),
        ("sara", 0),
        ("grpo", 1),
        ("sara", 1),
        ("vigor", 0),
        ("vigor", 1),
    ]
    runs = runs_lib.plan(vigor, [0, 1], tmp_path / "root")
    assert [r.status for r in runs] == ["done"] * 4
    dirs = sorted(p.name for p in (tmp_path / "root" / "runs").iterdir())
    assert len(dirs) == 6  # 2 shared GRPO runs + 2 SARA + 2 VIGOR
    # A rerun of a page starts nothing.
    fake.calls.clear()
    _run(sara, tmp_path, fake)
    assert fake.calls == []


def test_key_follows_resolved_config_and_seed(tmp_path):
    a = pulse_repro("x", "sara", "sara/sara.py")
    b = pulse_repro("x", "sara", "sara/sara.py", **{"select.sara.tau_commit": 0.5})
    ka = [r.key for r in runs_lib.plan(a, [0, 1], tmp_path)]
    kb = [r.key for r in runs_lib.plan(b, [0, 1], tmp_path)]
    assert ka[0] == kb[0] and ka[1] == kb[1]  # the GRPO arms: same config, same runs
    assert ka[0] != ka[1]  # another seed is another run
    assert ka[2] != kb[2] and ka[3] != kb[3]  # one field different: other runs
    # An override equal to the config file's value resolves to the same run.
    c = pulse_repro("x", "sara", "sara/sara.py", **{"select.sara.tau_commit": 0.45})
    assert [r.key for r in runs_lib.plan(c, [0, 1], tmp_path)] == ka


def test_interrupted_run_is_resumed_and_finished_runs_are_not(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    fake.stop_early.add(("sara", 1))
    _run(repro, tmp_path, fake)
    runs = runs_lib.plan(repro, [0, 1], tmp_path / "root")
    assert [r.status for r in runs] == ["done", "done", "done", "interrupted"]
    fake.calls.clear()
    page = _run(repro, tmp_path, fake)
    assert fake.calls == [("sara", 1)]
    manifest = runs_lib.plan(repro, [0, 1], tmp_path / "root")[3].manifest
    assert manifest["status"] == "done" and len(manifest["attempts"]) == 2
    assert all(a["how"] == "not pinned" and a["rc"] == 0 for a in manifest["attempts"])
    assert runs_lib.pin_prefix("1", 10) == ["taskset", "-c", "1", "nice", "-n", "10"]
    assert "| sara | 1 | done |" in page.read_text()


def test_keyboard_interrupt_marks_the_run_interrupted(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")

    def interrupted(run, log):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(repro, tmp_path, interrupted)
    first = runs_lib.plan(repro, [0, 1], tmp_path / "root")[0]
    assert first.status == "interrupted"
    _run(repro, tmp_path, fake)  # resumes it
    assert fake.calls[0] == ("grpo", 0)


def test_crashed_run_is_reported_and_not_retried_unless_asked(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    fake.crash.add(("sara", 0))
    page = _run(repro, tmp_path, fake).read_text()
    assert "| sara | 0 | crashed |" in page
    assert "Traceback: boom" in page  # the end of its log
    assert "| sara | method | 1/2 (1 crashed) |" in page
    fake.calls.clear()
    _run(repro, tmp_path, fake)
    assert fake.calls == []
    _run(repro, tmp_path, fake, retry_crashed=True)
    assert fake.calls == [("sara", 0)]
    assert runs_lib.plan(repro, [0, 1], tmp_path / "root")[2].status == "done"


def test_config_mismatch_is_an_error(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    _run(repro, tmp_path, fake)
    run = runs_lib.plan(repro, [0, 1], tmp_path / "root")[0]
    cfg = json.loads((run.workdir / "config.json").read_text())
    cfg["train"]["steps"] += 1
    (run.workdir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="differs from the config the harness resolved"):
        runs_lib.is_complete(run)


def test_a_field_newer_than_the_harness_is_no_mismatch(tmp_path, fake):
    """A run launched after a library option was added (while an older harness process
    ran) writes the option's default into config.json; the harness's resolved config
    lacks the field: not a difference. A changed value of a field both know still is."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    _run(repro, tmp_path, fake)
    run = runs_lib.plan(repro, [0, 1], tmp_path / "root")[0]
    cfg = json.loads((run.workdir / "config.json").read_text())
    cfg["loss"]["an_option_added_since"] = 0.5
    (run.workdir / "config.json").write_text(json.dumps(cfg))
    assert runs_lib.is_complete(run)
    cfg["train"]["steps"] += 1
    (run.workdir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="train.steps"):
        runs_lib.is_complete(run)


def test_unknown_override_names_arm_and_field(tmp_path):
    repro = pulse_repro("x", "sara", "sara/sara.py", **{"select.sara.tau_comit": 0.5})
    with pytest.raises(ValueError, match=r"arm 'sara'.*select\.sara\.tau_comit"):
        runs_lib.plan(repro, [0], tmp_path)


def test_command_parses_to_the_resolved_config(tmp_path):
    """The page's command line, parsed as rlvr_jax.main parses it, is the resolved config."""
    arm = Arm(
        "x",
        "sara/sara.py:pulse",
        {
            "select.sara.tau_commit": 0.5,
            "train.steps": 3,
            "select.sara.fresh": "predicted",
            "eval.at_start": False,
        },
    )
    resolved = runs_lib.resolve(arm, 7, {"eval.num_problems": 2})
    cmd = runs_lib.command(arm, 7, {"eval.num_problems": 2}, tmp_path / "w")
    argv = [cmd[0]] + cmd[3:]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file(
        "config", None, "", flag_values=fv, lock_config=True, sys_argv=argv
    )
    flags.DEFINE_string("workdir", None, "", flag_values=fv)
    fv(argv)
    assert fv.config.to_json() == resolved.to_json()
    assert resolved.seed == 7 and resolved.select.sara.tau_commit == 0.5


def test_key_ignores_fields_at_their_default(tmp_path):
    """A field added to the library later (absent from an old run's config) keeps the key."""
    from rlvr_jax.rl.config import default_config

    # The defaults' only delta: a default changed after the pages were recorded
    # (runs.RECORDED_DEFAULTS), keyed as its old value.
    delta = runs_lib.config_delta(json.loads(default_config().to_json()))
    assert delta == {"model.attention": "auto"}
    run = runs_lib.plan(pulse_repro("x", "sara", "sara/sara.py"), [0], tmp_path)[1]
    old = json.loads(json.dumps(run.config))
    default_valued = [
        k for k in old["loss"] if f"loss.{k}" not in runs_lib.config_delta(run.config)
    ]
    assert default_valued
    del old["loss"][default_valued[0]]
    assert runs_lib.run_key(old, []) == runs_lib.run_key(run.config, [])
    old["loss"][default_valued[0]] = "something else"
    assert runs_lib.run_key(old, []) != runs_lib.run_key(run.config, [])


def test_runs_under_an_old_key_are_adopted(tmp_path, fake):
    """A finished run in a directory named by another key is moved to its delta key."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    _run(repro, tmp_path, fake)
    first = runs_lib.plan(repro, [0, 1], tmp_path / "root")[0]
    legacy = first.workdir.parent / "00000000legacy00"
    first.workdir.rename(legacy)
    fake.calls.clear()
    page = _run(repro, tmp_path, fake)
    assert fake.calls == []  # found again, not rerun
    assert first.workdir.is_dir() and not legacy.exists()
    assert "| grpo | 0 | done |" in page.read_text()


def test_a_run_held_by_another_harness_is_skipped_and_its_record_kept(tmp_path, fake):
    """Two harnesses on one root: the second neither runs nor rewrites what the first holds."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    first = runs_lib.plan(repro, [0], tmp_path)[0]
    first.workdir.mkdir(parents=True)
    other = FileLock(first.workdir / runs_lib.HARNESS_LOCK).acquire()  # "another harness"
    lines = []
    runs_lib.execute(first, fake, echo=lines.append)
    assert fake.calls == [] and "running in another harness" in lines[0]
    assert not (first.workdir / runs_lib.MANIFEST).exists()
    other.release()
    # The other harness finishes it; a harness holding the plan-time (empty) manifest
    # then finds it done without starting it again or dropping the other's attempt.
    stale = runs_lib.plan(repro, [0], tmp_path)[0]
    runs_lib.execute(runs_lib.plan(repro, [0], tmp_path)[0], fake, echo=lambda *_: None)
    runs_lib.execute(stale, fake, echo=lambda *_: None)
    assert fake.calls == [("grpo", 0)]
    manifest = runs_lib.read_manifest(first.workdir)
    assert manifest["status"] == "done" and len(manifest["attempts"]) == 1


def test_the_page_shows_a_run_another_harness_finished_meanwhile(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    grpo = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    grpo.workdir.mkdir(parents=True)
    other = FileLock(grpo.workdir / runs_lib.HARNESS_LOCK).acquire()

    def launch(run, log):  # while this harness trains SARA, the other finishes GRPO
        if other.held:
            other.release()
            runs_lib.execute(grpo, fake, echo=lambda *_: None)
        return fake(run, log)

    page = reproduce(
        repro, [0], tmp_path / "root", launch=launch, docs=tmp_path / "docs", echo=lambda *_: None
    ).read_text()
    assert fake.calls == [("grpo", 0), ("sara", 0)]  # GRPO by the other harness, once
    assert "| grpo | 0 | done |" in page and "| sara | 0 | done |" in page


def test_a_run_left_untrained_is_recorded_as_another_harness_finished_it(tmp_path, fake):
    """`arms=` trains SARA only; GRPO, finished by another harness meanwhile, is read
    afresh before its record is written (a stale manifest would record no attempt)."""
    from rlvr_jax.repro import records as records_lib

    repro = pulse_repro("sara", "sara", "sara/sara.py")
    grpo = runs_lib.plan(repro, [0], tmp_path / "root")[0]

    def launch(run, log):
        if not fake.calls:  # the other harness finishes GRPO while this one trains SARA
            runs_lib.execute(grpo, fake, echo=lambda *_: None)
        return fake(run, log)

    page = reproduce(
        repro,
        [0],
        tmp_path / "root",
        launch=launch,
        docs=tmp_path / "docs",
        echo=lambda *_: None,
        plot=False,
        arms=("sara",),
    ).read_text()
    assert fake.calls == [("grpo", 0), ("sara", 0)]
    assert "| grpo | 0 | done |" in page
    rec = records_lib.load(records_lib.path(tmp_path / "docs" / "records", grpo.key))
    assert len(rec["manifest"]["attempts"]) == 1


def test_each_attempt_records_the_warm_start_weights_it_used(tmp_path, monkeypatch, fake):
    from rlvr_jax.train import warmstart

    monkeypatch.setattr(warmstart, "DEFAULT_CACHE_DIR", tmp_path / "cache")
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    run = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    run.config = dict(run.config, model=dict(run.config["model"], source="warm_start"))
    run.config["model"]["domain"] = "countdown"
    names = runs_lib.warm_start_names(run.config)
    assert names and all(n.startswith("countdown-") for n in names)
    (tmp_path / "cache" / names[0]).mkdir(parents=True)
    (tmp_path / "cache" / names[0] / "model.safetensors").write_bytes(b"weights")
    runs_lib.execute(run, fake, echo=lambda *_: None)
    (attempt,) = runs_lib.read_manifest(run.workdir)["attempts"]
    assert attempt["warm_starts"] == {names[0]: _sha(b"weights")}


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:12]


def test_a_run_held_by_a_live_harness_or_trainer_is_never_moved(tmp_path, fake):
    """adopt_legacy_runs leaves a directory whose repro.lock or run.lock is held: a harness
    of other code may be executing it (a run once moved mid-training this way)."""
    from rlvr_jax.locking import FileLock

    repro = pulse_repro("sara", "sara", "sara/sara.py")
    _run(repro, tmp_path, fake)
    first = runs_lib.plan(repro, [0, 1], tmp_path / "root")[0]
    for name in (runs_lib.HARNESS_LOCK, runs_lib.TRAINER_LOCK):
        legacy = first.workdir.parent / "00000000legacy00"
        first.workdir.rename(legacy)
        held = FileLock(legacy / name).acquire()
        try:
            assert runs_lib.adopt_legacy_runs(tmp_path / "root", echo=lambda *_: None) == []
            assert legacy.is_dir()
        finally:
            held.release()
        moved = runs_lib.adopt_legacy_runs(tmp_path / "root", echo=lambda *_: None)
        assert moved == [("00000000legacy00", first.key)] and first.workdir.is_dir()
