"""Finished runs kept as records: a page rebuilds on a fresh root, and seeds add up."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest

from rlvr_jax.repro import records as records_lib
from rlvr_jax.repro import runs as runs_lib
from tests.repro.conftest import page_text, pulse_repro


def test_a_fresh_root_rebuilds_the_page_from_records_without_training(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    before = page_text(repro, tmp_path, fake, [0, 1])
    records = sorted(p.name for p in (tmp_path / "docs" / "records").iterdir())
    keys = sorted({r.key for r in runs_lib.plan(repro, [0, 1], tmp_path / "root")})
    assert records == [k + ".json.gz" for k in keys]  # one per distinct finished run
    shutil.rmtree(tmp_path / "root")  # a new machine: the runs are gone
    fake.calls.clear()
    after = page_text(repro, tmp_path, fake, [0, 1], train=False)
    assert fake.calls == []
    # The same table rows, from records alone.
    table = [line for line in before.splitlines() if line.startswith("| sara |")]
    assert table and table == [line for line in after.splitlines() if line.startswith("| sara |")]
    assert "40.5 ± 0.7" in table[0]  # SARA: pass@1 0.40 and 0.41 (fake scores)


def test_new_seeds_add_to_restored_ones(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    shutil.rmtree(tmp_path / "root")
    fake.calls.clear()
    page_text(repro, tmp_path, fake, [0, 1], root="root2")
    assert fake.calls == [("grpo", 1), ("sara", 1)]  # seed 0 restored, only seed 1 trained
    runs = runs_lib.plan(repro, [0, 1], tmp_path / "root2")
    assert [r.status for r in runs] == ["done"] * 4
    assert [bool(r.manifest.get("restored_from")) for r in runs] == [True, False, True, False]
    # The restored run's manifest keeps its original attempt (commands, CPU time).
    assert runs[0].manifest["attempts"][0]["rc"] == 0


def test_a_local_run_wins_over_its_record_and_a_rerun_refreshes_the_record(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    grpo = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    record = records_lib.path(tmp_path / "docs" / "records", grpo.key)
    assert records_lib.restore(grpo, record.parent) == records_lib.LOCAL  # untouched
    # A second attempt (the run was moved away and retrained) makes the record stale.
    first = records_lib.load(record)["manifest"]["attempts"]
    (grpo.workdir / "metrics.jsonl").unlink()
    runs_lib.execute(grpo, fake, echo=lambda *_: None)
    assert records_lib.save(grpo, record.parent) == record
    assert len(records_lib.load(record)["manifest"]["attempts"]) == len(first) + 1
    assert records_lib.save(grpo, record.parent) is None  # nothing new: not rewritten


def test_records_are_byte_stable_and_bad_records_name_their_file(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    records = tmp_path / "docs" / "records"
    run = runs_lib.plan(repro, [0], tmp_path / "root")[1]
    target = records_lib.path(records, run.key)
    data = target.read_bytes()
    target.unlink()
    assert records_lib.save(run, records) == target and target.read_bytes() == data
    rec = json.loads(gzip.decompress(data))
    assert rec["key"] == run.key and rec["metrics"][-1]["pass@1"] == pytest.approx(0.40)
    target.write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=target.name):
        records_lib.load(target)
    # A record filed under the wrong key is refused, not restored.
    other = runs_lib.plan(repro, [1], tmp_path / "root")[1]
    target.write_bytes(data)
    shutil.copy(target, records_lib.path(records, other.key))
    with pytest.raises(ValueError, match=f"expected {other.key}"):
        records_lib.restore(other, records)


def test_a_record_made_on_other_warm_start_weights_is_not_restored(tmp_path, monkeypatch, fake):
    from rlvr_jax.train import warmstart

    monkeypatch.setattr(warmstart, "DEFAULT_CACHE_DIR", tmp_path / "cache")
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    run = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    record = records_lib.load(records_lib.path(tmp_path / "docs" / "records", run.key))
    # Pretend the run used warm start "w" with digest "aaa".
    record["manifest"]["attempts"][-1]["warm_starts"] = {"w": "aaa"}
    assert records_lib.recorded_weights(record) == {"w": "aaa"}
    with gzip.open(records_lib.path(tmp_path / "docs" / "records", run.key), "wb") as f:
        f.write(json.dumps(record).encode())
    fresh = runs_lib.plan(repro, [0], tmp_path / "fresh")[0]
    records = tmp_path / "docs" / "records"
    assert (
        records_lib.restore(fresh, records, local_weights={"w": "bbb"}) == records_lib.OTHER_WEIGHTS
    )  # retrained
    assert not (fresh.workdir / "config.json").exists()
    assert records_lib.restore(fresh, records, local_weights={"w": "aaa"}) == records_lib.RESTORED
    other = runs_lib.plan(repro, [0], tmp_path / "other")[0]
    assert records_lib.restore(other, records, local_weights={}) == records_lib.RESTORED  # unknown
    unseeded = runs_lib.plan(repro, [7], tmp_path / "none")[0]
    assert records_lib.restore(unseeded, records) == records_lib.NO_RECORD


def _set_weights(file, weights):
    """Rewrites the record at `file` as if its run had started from `weights`."""
    rec = records_lib.load(file)
    rec["manifest"]["attempts"][-1]["warm_starts"] = dict(weights)
    with gzip.open(file, "wb") as f:
        f.write(json.dumps(rec).encode())


def test_a_rerun_on_other_weights_is_kept_beside_the_first_record_and_each_base_restores_its_own(
    tmp_path, fake
):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    records = tmp_path / "docs" / "records"
    run = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    first = records_lib.path(records, run.key)
    _set_weights(first, {"w": "aaa"})  # recorded on machine A's base
    # The same config rerun on machine B's base: a new attempt with other weights.
    run.manifest["attempts"].append(dict(run.manifest["attempts"][-1], warm_starts={"w": "bbb"}))
    beside = records_lib.save(run, records)
    assert beside == records_lib.path(records, run.key, {"w": "bbb"}) != first
    assert records_lib.recorded_weights(records_lib.load(first)) == {"w": "aaa"}  # not written over
    assert records_lib.save(run, records) is None  # nothing new since
    assert records_lib.versions(records, run.key) == [first, beside]

    def restored_from(root, **kwargs):
        fresh = runs_lib.plan(repro, [0], tmp_path / root)[0]
        assert records_lib.restore(fresh, records, **kwargs) == records_lib.RESTORED
        return fresh.manifest["restored_from"]

    assert restored_from("a", local_weights={"w": "aaa"}) == first.name
    assert restored_from("b", local_weights={"w": "bbb"}) == beside.name
    # Nothing cached: the caller's preferred base, else the first record.
    assert restored_from("c", local_weights={}, prefer={"w": "bbb"}) == beside.name
    assert restored_from("d", local_weights={}) == first.name
    other = runs_lib.plan(repro, [0], tmp_path / "e")[0]
    assert records_lib.restore(other, records, local_weights={"w": "ccc"}) == (
        records_lib.OTHER_WEIGHTS
    )
    # About to train with the base not built yet: not restored (it may differ).
    assert records_lib.restore(other, records, local_weights={}, require_cached=True) == (
        records_lib.NOT_CACHED
    )
    assert not (other.workdir / "config.json").exists()


def test_a_restored_copy_is_chosen_again_and_a_run_made_here_is_not(tmp_path, fake):
    """Two pages sharing a run in one root prefer different versions of its record:
    each rebuild restores its own (the copy holds nothing the records lack); a copy
    that fits no longer is removed; a run trained here is never replaced."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    records = tmp_path / "docs" / "records"
    run = runs_lib.plan(repro, [0], tmp_path / "root")[0]
    first = records_lib.path(records, run.key)
    _set_weights(first, {"w": "aaa"})
    run.manifest["attempts"].append(dict(run.manifest["attempts"][-1], warm_starts={"w": "bbb"}))
    beside = records_lib.save(run, records)

    def restore(**kwargs):
        shared = runs_lib.plan(repro, [0], tmp_path / "shared")[0]
        outcome = records_lib.restore(shared, records, local_weights={}, **kwargs)
        return outcome, shared.manifest.get("restored_from")

    a, b = {"w": "aaa"}, {"w": "bbb"}
    assert restore(prefer=a) == (records_lib.RESTORED, first.name)
    assert restore(prefer=a) == (records_lib.KEPT, first.name)
    assert restore(prefer=b) == (records_lib.RESTORED, beside.name)  # the other page
    assert restore(prefer=a) == (records_lib.RESTORED, first.name)
    shared = runs_lib.plan(repro, [0], tmp_path / "shared")[0]
    assert records_lib.restore(shared, records, local_weights={"w": "ccc"}) == (
        records_lib.OTHER_WEIGHTS
    )
    assert shared.manifest == {} and not (shared.workdir / "config.json").exists()
    # Restored, then trained on here (a new attempt): a local run from then on.
    assert restore(prefer=a)[0] == records_lib.RESTORED
    trained = runs_lib.plan(repro, [0], tmp_path / "shared")[0]
    trained.manifest["attempts"].append({"warm_starts": {"w": "aaa"}, "wall_s": 1.0})
    (trained.workdir / "repro.json").write_text(json.dumps(trained.manifest))
    assert restore(prefer=b) == (records_lib.LOCAL, first.name)


def test_the_preferred_weights_are_those_most_of_the_page_runs_have_records_on(tmp_path, fake):
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0, 1])
    records = tmp_path / "docs" / "records"
    runs = runs_lib.plan(repro, [0, 1], tmp_path / "root")
    for i, r in enumerate(runs):  # three runs on "aaa", one on "bbb"
        _set_weights(records_lib.path(records, r.key), {"w": "bbb" if i == 0 else "aaa"})
    assert records_lib.preferred_weights(runs, records) == {"w": "aaa"}
    assert records_lib.preferred_weights(runs, tmp_path / "empty") == {}


def test_a_tie_goes_to_the_weights_the_repository_ships(tmp_path, fake, monkeypatch):
    """cbpo's tool_lookup arms re-run on the shipped base beside their old records: as
    many keys agree with each, and a fresh clone, which installs the shipped copy, must
    rebuild the page on it (not on whichever tag sorts first)."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0, 1])
    records = tmp_path / "docs" / "records"
    runs = runs_lib.plan(repro, [0, 1], tmp_path / "root")
    for r in runs:
        file = records_lib.path(records, r.key)
        data = file.read_bytes()
        _set_weights(file, {"w": "zzz"})  # the old base
        beside = records_lib.path(records, r.key, {"w": "aaa"})
        beside.write_bytes(data)
        _set_weights(beside, {"w": "aaa"})
    monkeypatch.setattr(records_lib.shipped, "digest", lambda name: None)
    by_tag = records_lib.preferred_weights(runs, records)["w"]  # a full tie: the tag decides
    other = {"aaa": "zzz", "zzz": "aaa"}[by_tag]
    monkeypatch.setattr(records_lib.shipped, "digest", lambda name: other if name == "w" else None)
    assert records_lib.preferred_weights(runs, records) == {"w": other}  # the shipped one


def test_preferred_weights_compare_records_naming_different_warm_starts(tmp_path, fake):
    """H2SD's case: one machine's records name different subsets of its warm starts;
    counting equal sets split that machine's votes (here 2 + 1 + 2 against 3) and
    chose the other machine's weights, which fewer of the runs have a record on."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0, 1, 2])
    records = tmp_path / "docs" / "records"
    runs = runs_lib.plan(repro, [0, 1, 2], tmp_path / "root")
    keys = sorted({r.key for r in runs})
    assert len(keys) == 6
    old = {"p": "old", "b": "old"}
    mine = [{"p": "new"}, {"p": "new"}, {"p": "new", "t": "new"}, {"p": "new", "b": "new"}]
    for i, key in enumerate(keys):
        file = records_lib.path(records, key)
        if i < 3:  # only on the new machine
            _set_weights(file, mine[i])
            continue
        data = file.read_bytes()
        _set_weights(file, old)  # the old machine's record first
        if i < 5:  # rerun on the new machine: kept beside it
            beside = records_lib.path(records, key, mine[3])
            beside.write_bytes(data)
            _set_weights(beside, mine[3])
    # new weights agree with 5 keys' records, the old ones with 3 (keys 3, 4, 5)
    preferred = records_lib.preferred_weights(runs, records)
    assert preferred == {"p": "new", "b": "new", "t": "new"}, preferred
    # OC-GRPO's case: a second base "a" that only the new machine has (it agrees
    # with every record, as it is named by no old one): it is added, not chosen
    # instead of the new machine's "p", "b"
    _set_weights(records_lib.path(records, keys[0]), {"a": "x", "q": "x", "r": "x", "s": "x"})
    # scores: {a, q, r, s} 6 keys; the new sets 5 each; the old set 4 (keys 0, 3, 4, 5)
    preferred = records_lib.preferred_weights(runs, records)
    assert preferred == {"a": "x", "q": "x", "r": "x", "s": "x", "p": "new", "b": "new", "t": "new"}


def test_training_restores_a_record_only_once_its_base_is_built_here_and_matches(
    tmp_path, monkeypatch, fake
):
    """Seed 0's records on base "aaa"; this machine has no base yet. The first run
    builds it: when it comes out "aaa" the other records are restored, when it comes
    out "bbb" every run trains again (kept beside the "aaa" records, not over them)."""
    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0])
    records = tmp_path / "docs" / "records"
    for r in runs_lib.plan(repro, [0], tmp_path / "root"):
        _set_weights(records_lib.path(records, r.key), {"w": "aaa"})
    before = {p.name: p.read_bytes() for p in records.iterdir()}
    for built, trained in (("aaa", [("grpo", 0)]), ("bbb", [("grpo", 0), ("sara", 0)])):
        cache: dict[str, str] = {}
        monkeypatch.setattr(runs_lib, "warm_start_digests", lambda config, c=cache: dict(c))

        def launch(run, log, c=cache, digest=built):
            c["w"] = digest  # the first run trains the base on its way
            return fake(run, log)

        fake.calls.clear()
        page_text(repro, tmp_path, launch, [0], root=f"root_{built}")
        assert fake.calls == trained, built
    # The "bbb" runs are kept beside the "aaa" records: SARA's is unchanged (restored,
    # then rerun on "bbb"), GRPO's was refreshed by its "aaa" rerun and is still on "aaa".
    grpo, sara = runs_lib.plan(repro, [0], tmp_path / "x")
    first = records_lib.path(records, sara.key).name
    assert (records / first).read_bytes() == before[first]
    grpo_record = records_lib.load(records_lib.path(records, grpo.key))
    assert records_lib.recorded_weights(grpo_record) == {"w": "aaa"}
    assert sorted(p.name for p in records.iterdir() if "+" in p.name) == sorted(
        f"{r.key}+{records_lib.weights_tag({'w': 'bbb'})}.json.gz" for r in (grpo, sara)
    )


def test_every_finished_run_on_a_committed_page_has_its_record():
    """A page whose runs have no records cannot be rebuilt on a fresh clone (the
    agentic page showed runs of an older config that no record kept)."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "reproductions"
    row = re.compile(r"^\| [^|]+ \| \d+ \| done \|.*\| `([0-9a-f]{16})` \|$", re.M)
    pages = sorted(docs.glob("*.md"))
    assert len(pages) >= 28
    for page in pages:
        keys = row.findall(page.read_text())
        assert keys, f"{page.name}: no finished runs listed"
        missing = [k for k in keys if not records_lib.versions(docs / "records", k)]
        assert not missing, f"{page.name}: runs without a record: {missing}"


def _pipeline_config() -> dict:
    from rlvr_jax.pipeline.config import add_stage, pipeline_config

    c = pipeline_config()
    add_stage(c, "sft", "sft")
    add_stage(c, "rl", "rl", init="sft")
    c.stages.rl.run.train.steps = 7
    return json.loads(c.to_json())


def test_a_pipeline_stage_is_keyed_against_its_kind_defaults():
    """An RL option added to the library (absent from an old pipeline run's config) keeps
    the run's key; a stage's kind and changed fields are in the delta, defaults are not."""
    config = _pipeline_config()
    delta = runs_lib.config_delta(config)
    assert delta["stages.rl.run.train.steps"] == 7
    assert delta["stages.sft.kind"] == "sft" and delta["stages.rl.kind"] == "rl"
    assert delta["stages.rl.init"] == "sft" and delta["order"] == "sft,rl"
    assert not any(k.startswith("stages.rl.run.loss.") for k in delta)
    assert "model.domain" not in delta  # the pipeline's own fields at their defaults
    old = json.loads(json.dumps(config))
    del old["stages"]["rl"]["run"]["loss"]["kl_coef"]
    assert runs_lib.run_key(old, []) == runs_lib.run_key(config, [])
    old["stages"]["rl"]["run"]["loss"]["kl_coef"] = 0.123
    assert runs_lib.run_key(old, []) != runs_lib.run_key(config, [])
    other_kind = json.loads(json.dumps(config))
    other_kind["stages"]["rl"]["kind"] = "opd"
    assert runs_lib.run_key(other_kind, []) != runs_lib.run_key(config, [])


def test_records_under_an_old_key_are_moved_to_their_delta_key(tmp_path):
    """`rekey` renames a record (its +weights tag kept) and rewrites its key and workdir."""
    config = _pipeline_config()
    new = runs_lib.run_key(config, runs_lib.warm_start_names(config))
    for name in ("00000000legacy00", "00000000legacy00+abcd1234"):
        rec = {
            "format": records_lib.FORMAT,
            "key": "00000000legacy00",
            "config": config,
            "manifest": {
                "key": "00000000legacy00",
                "command": "x --workdir=/r/runs/00000000legacy00",
            },
            "metrics": [{"step": 0, "split": "eval"}],
        }
        records_lib._write(tmp_path / f"{name}{records_lib.SUFFIX}", rec)
    moved = records_lib.rekey(tmp_path, echo=lambda *_: None)
    assert moved == [("00000000legacy00", new)] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{new}+abcd1234{records_lib.SUFFIX}",
        f"{new}{records_lib.SUFFIX}",
    ]
    rec = records_lib.load(records_lib.path(tmp_path, new))
    assert rec["key"] == rec["manifest"]["key"] == new
    assert rec["manifest"]["command"] == f"x --workdir=/r/runs/{new}"
    assert rec["metrics"] == [{"step": 0, "split": "eval"}]
    assert records_lib.rekey(tmp_path, echo=lambda *_: None) == []  # settled


def test_training_named_arms_tabulates_the_others_from_their_records(tmp_path, monkeypatch, fake):
    """`arms=`: only the named arm trains; the other arm is restored from its records even
    when this machine's cache holds other weights (it is not retrained)."""
    from rlvr_jax.repro import reproduce

    repro = pulse_repro("sara", "sara", "sara/sara.py")
    page_text(repro, tmp_path, fake, [0, 1])
    shutil.rmtree(tmp_path / "root")  # a new machine ...
    monkeypatch.setattr(runs_lib, "warm_start_digests", lambda config: {"w": "other"})
    for f in (tmp_path / "docs" / "records").iterdir():  # ... whose base differs
        _set_weights(f, {"w": "recorded"})
    fake.calls.clear()
    common = dict(launch=fake, docs=tmp_path / "docs", echo=lambda *_: None, plot=False)
    with pytest.raises(ValueError, match="no arm \\['nope'\\]"):
        reproduce(repro, [0, 1], tmp_path / "root", arms=("nope",), **common)
    page = reproduce(repro, [0, 1], tmp_path / "root", arms=("sara",), **common).read_text()
    assert sorted(fake.calls) == [("sara", 0), ("sara", 1)]  # grpo was not retrained
    assert "| grpo | 0 | done |" in page and "| sara | 1 | done |" in page


def test_only_the_warm_starts_a_run_loads_count_as_its_weights():
    """A GRPO run loads its base only; a teacher run its base and teacher; a judge run its
    judge; a pipeline cannot tell (None: every recorded name counts)."""
    from rlvr_jax.rl.config import default_config
    from rlvr_jax.train import warmstart

    tok = warmstart.default_tokenizer()

    def name(domain, role):
        return warmstart.model_dir(warmstart.SPECS[domain, role], tok).name

    c = json.loads(default_config().to_json())
    assert runs_lib.used_warm_starts(c) == {name("countdown", "base")}
    c["model"]["role"] = "privileged"
    c["score"]["signals"] = "teacher,hint"
    assert runs_lib.used_warm_starts(c) == {
        name("countdown", "privileged"),
        name("countdown", "teacher"),
    }
    j = json.loads(default_config().to_json())
    j["model"]["domain"] = "arithmetic"
    j["score"]["signals"] = "first_mistake"
    j["score"]["first_mistake"]["locator"] = "judge"
    assert runs_lib.used_warm_starts(j) == {name("arithmetic", "base"), name("arithmetic", "judge")}
    assert runs_lib.used_warm_starts(_pipeline_config()) is None
    recorded = {name("countdown", "base"): "aaa", name("countdown", "teacher"): "bbb"}
    c["score"]["signals"] = ""
    assert runs_lib.weights_used(recorded, c) == {}  # the privileged role only: neither
    manifest = {"attempts": [{"warm_starts": recorded}]}
    assert records_lib.manifest_weights(manifest) == recorded
    assert records_lib.manifest_weights(manifest, json.loads(default_config().to_json())) == {
        name("countdown", "base"): "aaa"
    }


def test_a_changed_default_keeps_recorded_keys_and_runs_pages_as_recorded(tmp_path):
    """model.attention's default became "auto" after the pages were recorded with "xla":
    a config holding "xla" keys as before (no delta), one holding "auto" has it in its
    delta, and the harness runs arms that leave it at the default with "xla"."""
    from rlvr_jax.repro import Arm, Claim, Reproduction
    from rlvr_jax.repro.metrics import PASS_1
    from rlvr_jax.rl.config import default_config

    assert default_config().model.attention == "auto"
    config = json.loads(default_config().to_json())
    assert runs_lib.config_delta(config) == {"model.attention": "auto"}
    config["model"]["attention"] = "xla"
    assert runs_lib.config_delta(config) == {}
    pipeline = _pipeline_config()
    assert "stages.rl.run.model.attention" in runs_lib.config_delta(pipeline)
    pins = runs_lib.recorded_defaults(runs_lib.load_config("seq_opd_rl/pipeline.py:sequential"))
    assert pins == {"stages.opd.run.model.attention": "xla", "stages.rl.run.model.attention": "xla"}
    arms = (
        Arm("grpo", "baselines/grpo.py:pulse", role="baseline"),
        Arm("block", "baselines/grpo.py:pulse", {"model.attention": "blockwise"}),
    )
    repro = Reproduction(
        slug="pins", paper="p", arms=arms, baseline="grpo", metrics=(PASS_1,),
        claims=(Claim("c", "pass@1", "block", "grpo", "higher"),),
    )  # fmt: skip
    grpo, block = runs_lib.plan(repro, [0], tmp_path)
    assert grpo.config["model"]["attention"] == "xla"
    assert "--config.model.attention=xla" in grpo.command
    assert "model.attention" not in runs_lib.config_delta(grpo.config)
    assert block.config["model"]["attention"] == "blockwise"  # the arm's own choice wins
    assert "--config.model.attention=xla" not in block.command
