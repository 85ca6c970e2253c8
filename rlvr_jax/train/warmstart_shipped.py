"""Warm-start weights shipped in the repository: one base for every machine.

SFT on CPU is not bit-reproducible across machines, so two machines that train
the same spec get two bases, and runs made from them are not comparable (the
reproduction pages refuse to compare them). The bases the pages are measured on
are therefore shipped under `rlvr_jax/assets/warm_starts/<name>/` (`name` is the
cache directory name `warmstart.model_dir` gives: domain, role and a hash of the
spec and the tokenizer, so shipped weights are only ever used for the spec they
were trained from). When the cache lacks a model whose directory is shipped,
`install` copies it into the cache instead of training it; the cache, not the
shipped copy, is what runs load and what `repro.runs.warm_start_digests` reads.

Training stays the way to make a new base: `scripts/make_base_models.py --force`
retrains one into the cache, and `RLVR_JAX_SHIPPED_WARM_STARTS=0` turns
installing off. `ship(path)` (`scripts/make_base_models.py --ship`) copies a
cached model into the assets; each is ~1-4 MB (`MAX_BYTES` bounds one).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "assets" / "warm_starts"
ENV = "RLVR_JAX_SHIPPED_WARM_STARTS"  # "0": never install shipped weights (train instead)
INFO_FILE = "warmstart.json"
FILES = ("config.json", "model.safetensors", INFO_FILE)  # plus the tokenizer's file
TOKENIZER_FILES = ("tokenizer.model", "char_tokenizer.json")
MAX_BYTES = 8 * 2**20  # one shipped model; the tiny bases are 1-4 MB


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def shipped(name: str, root: Path | None = None) -> Path | None:
    """The shipped directory of cache name `name`, or None when none is shipped."""
    path = Path(root or SHIPPED_DIR) / name
    return path if (path / INFO_FILE).is_file() else None


def weights_digest(model_dir: Path) -> str:
    """sha256 (12 hex digits) of a warm-start model's weights: how records name them."""
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()[:12]


def digest(name: str, root: Path | None = None) -> str | None:
    """`weights_digest` of the shipped weights of cache name `name`, or None when none
    is shipped."""
    path = shipped(name, root)
    return None if path is None else weights_digest(path)


def _files(src: Path) -> list[Path]:
    missing = [f for f in FILES if not (src / f).is_file()]
    tokenizer = [src / f for f in TOKENIZER_FILES if (src / f).is_file()]
    if missing or not tokenizer:
        raise FileNotFoundError(
            f"{src}: not a complete warm-start model (missing {missing or 'a tokenizer file'})"
        )
    return [src / f for f in FILES] + tokenizer


def install(path: Path, root: Path | None = None) -> bool:
    """Copies the shipped model named like cache directory `path` into it.

    Returns False (and copies nothing) when installing is off, nothing of that
    name is shipped, or `path` already holds a model. The copy is written under
    `<name>.tmp<pid>` and renamed when complete; its warmstart.json's `path` names
    the cache directory and `shipped_from` the asset. Callers hold the model's
    lock (`warmstart.train_warm_start`).
    """
    path = Path(path)
    src = shipped(path.name, root) if enabled() else None
    if src is None or (path / INFO_FILE).is_file():
        return False
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in _files(src):
        if f.name != INFO_FILE:
            shutil.copyfile(f, tmp / f.name)
    info = json.loads((src / INFO_FILE).read_text())
    info.update(path=str(path), shipped_from=str(src))
    (tmp / INFO_FILE).write_text(json.dumps(info, indent=2))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    log.info("warm start %s: installed the shipped weights from %s", path.name, src)
    return True


def ship(path: Path, root: Path | None = None) -> Path:
    """Copies cached model directory `path` into the shipped assets; returns the copy.

    Raises:
      FileNotFoundError when `path` is not a complete model; ValueError when its
      files exceed MAX_BYTES.
    """
    path = Path(path)
    files = _files(path)
    size = sum(f.stat().st_size for f in files)
    if size > MAX_BYTES:
        raise ValueError(f"{path}: {size / 2**20:.1f} MiB, over the {MAX_BYTES >> 20} MiB to ship")
    dest = Path(root or SHIPPED_DIR) / path.name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for f in files:
        if f.name == INFO_FILE:
            info = json.loads(f.read_text())
            info.pop("path", None)  # the machine's cache path means nothing elsewhere
            info.pop("shipped_from", None)
            (dest / INFO_FILE).write_text(json.dumps(info, indent=2))
        else:
            shutil.copyfile(f, dest / f.name)
    return dest
