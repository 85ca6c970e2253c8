"""Shipped warm-start weights: installed instead of trained, byte for byte, and only by name.

The promise: a fresh clone whose cache lacks a base the pages were measured on gets
the shipped weights (every machine starts from one base), never a base of another
spec, and training remains possible (`force`, the env switch).
"""

import dataclasses
import hashlib
import json

import pytest

from rlvr_jax.testing import toy_tokenizer
from rlvr_jax.train import warmstart as ws_lib
from rlvr_jax.train import warmstart_shipped as shipped_lib
from tests.train.test_sft_resume import SPEC


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def trained(tmp_path):
    """(spec, tokenizer, a model trained into cache A, its shipped copy's root)."""
    tok = toy_tokenizer(128)
    spec = dataclasses.replace(SPEC, steps=2)
    info = ws_lib.train_warm_start(spec, tokenizer=tok, cache_dir=tmp_path / "a", eval_problems=0)
    root = tmp_path / "assets"
    dest = shipped_lib.ship(info["path"], root)
    return spec, tok, ws_lib.model_dir(spec, tok, tmp_path / "a"), root, dest


def test_ship_copies_the_model_without_its_machine_path(trained):
    _, _, path, root, dest = trained
    assert dest == root / path.name
    assert _digest(dest / "model.safetensors") == _digest(path / "model.safetensors")
    info = json.loads((dest / "warmstart.json").read_text())
    assert "path" not in info and info["spec"]["steps"] == 2
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        ["config.json", "model.safetensors", "warmstart.json", "char_tokenizer.json"]
    )


def test_a_cache_without_the_model_installs_the_shipped_weights_instead_of_training(
    trained, tmp_path, monkeypatch
):
    spec, tok, path, root, _ = trained
    monkeypatch.setattr(shipped_lib, "SHIPPED_DIR", root)
    monkeypatch.setattr(ws_lib, "_train_and_save", lambda *a: pytest.fail("trained"))
    info = ws_lib.train_warm_start(spec, tokenizer=tok, cache_dir=tmp_path / "b", eval_problems=0)
    target = ws_lib.model_dir(spec, tok, tmp_path / "b")
    assert info["path"] == str(target) and info["shipped_from"] == str(root / path.name)
    assert _digest(target / "model.safetensors") == _digest(path / "model.safetensors")
    assert not shipped_lib.install(target, root)  # already there: left alone
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [target.name]  # no tmp or lock


def test_another_spec_or_the_switch_off_trains(trained, tmp_path, monkeypatch):
    spec, tok, _, root, _ = trained
    monkeypatch.setattr(shipped_lib, "SHIPPED_DIR", root)
    other = dataclasses.replace(spec, lr=spec.lr * 2)  # another hash: the shipped one is not it
    assert not shipped_lib.install(ws_lib.model_dir(other, tok, tmp_path / "c"))
    monkeypatch.setenv(shipped_lib.ENV, "0")
    assert not shipped_lib.install(ws_lib.model_dir(spec, tok, tmp_path / "c"))
    with pytest.raises(FileNotFoundError, match="make_base_models"):
        ws_lib.load_warm_start("countdown", "base", tokenizer=tok, cache_dir=tmp_path / "c",
                               train_if_missing=False)  # fmt: skip


def test_an_incomplete_or_oversized_model_is_refused_with_its_path(trained, tmp_path, monkeypatch):
    _, _, path, root, dest = trained
    (dest / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=str(dest)):
        shipped_lib.install(tmp_path / "d" / path.name, root)
    monkeypatch.setattr(shipped_lib, "MAX_BYTES", 10)
    with pytest.raises(ValueError, match="MiB"):
        shipped_lib.ship(path, tmp_path / "e")


def test_the_shipped_assets_are_complete_models_of_registered_specs():
    """Every shipped directory is a complete model named like the cache directory of a
    registered spec under the default tokenizer (so it is ever installed), and small."""
    tok = ws_lib.default_tokenizer()
    names = {ws_lib.model_dir(s, tok).name for s in ws_lib.SPECS.values()}
    dirs = sorted(p for p in shipped_lib.SHIPPED_DIR.glob("*") if p.is_dir())
    total = 0
    for d in dirs:
        assert d.name in names, f"{d}: no registered spec has this cache name"
        files = shipped_lib._files(d)
        total += sum(f.stat().st_size for f in files)
    assert total <= 4 * shipped_lib.MAX_BYTES
