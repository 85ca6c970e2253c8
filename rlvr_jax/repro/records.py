"""Finished runs kept in the repository: a page survives the machine its runs were made on.

A run's workdir (`<root>/runs/<key>/`) holds checkpoints and logs that do not
belong in git; what a page reads from it is small: the resolved config, the
harness manifest (commands, attempts, CPU time, warm-start digests) and the
metrics. `save` writes those three of a finished run to
`<records>/<key>.json.gz`; `restore` writes them back into an empty workdir, so
on a fresh clone or machine the run counts as finished (`runs.is_complete`)
without retraining, and new seeds add to the old ones. A restored run has no
checkpoint: it is read, never resumed.

The record is keyed like the run (`runs.run_key`), so a record only ever stands
for the config and warm-start names it was trained with; a warm start retrained
under the same name (SFT on CPU is not bit-reproducible across machines) is
visible in the attempts' digests. One key may hold one record per set of
warm-start weights: the first is `<key>.json.gz`, a run of the same config on
other weights is kept beside it as `<key>+<weights tag>.json.gz` (never written
over), and `restore` picks the version whose weights match this machine's cache,
or, with nothing cached, the one the caller prefers (`preferred_weights`: the
weights most of a page's runs were recorded on), so a page is rebuilt from runs
of one base.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.run.metrics_file import read_metrics
from rlvr_jax.train import warmstart_shipped as shipped

SUFFIX = ".json.gz"
FORMAT = 1
CONFIG, METRICS = "config.json", "metrics.jsonl"


def path(records: Path, key: str, weights: dict[str, str] | None = None) -> Path:
    """The record of `key` (with `weights`: the version kept beside it for those weights)."""
    tag = f"+{weights_tag(weights)}" if weights else ""
    return Path(records) / f"{key}{tag}{SUFFIX}"


def weights_tag(weights: dict[str, str]) -> str:
    """8 hex digits naming a set of warm-start weights (name -> digest)."""
    text = json.dumps(sorted(weights.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def versions(records: Path, key: str) -> list[Path]:
    """Every record of `key`: the first one, then those kept for other weights (sorted)."""
    first = path(records, key)
    others = sorted(Path(records).glob(f"{key}+*{SUFFIX}"))
    return ([first] if first.is_file() else []) + others


def conflicts(a: dict[str, str], b: dict[str, str]) -> bool:
    """True when a warm start named in both has different weights."""
    return any(name in b and b[name] != digest for name, digest in a.items())


def pack(run: runs_lib.Run) -> dict[str, Any]:
    """The record of a finished run, read from its workdir."""
    return {
        "format": FORMAT,
        "key": run.key,
        "config": json.loads((run.workdir / CONFIG).read_text()),
        "manifest": {k: v for k, v in run.manifest.items() if k != "restored_from"},
        "metrics": read_metrics(run.workdir / METRICS),
    }


def save(run: runs_lib.Run, records: Path) -> Path | None:
    """Writes the record of `run` if it is finished and its record is missing or stale.

    A record is stale when the run has attempts the record lacks (it was rerun).
    A run restored from a record is not written back. A run on other warm-start
    weights than the key's first record is written beside it (`path(..., weights)`).

    Returns:
      The path written, or None.
    """
    if run.status != runs_lib.DONE or run.manifest.get("restored_from"):
        return None
    target = path(records, run.key)
    old = load(target) if target.is_file() else None
    mine = manifest_weights(run.manifest, run.config)
    if old is not None and conflicts(recorded_weights(old), mine):
        target = path(records, run.key, mine)  # the first record stays: other pages use it
        old = load(target) if target.is_file() else None
    if old is not None and old["manifest"].get("attempts") == run.manifest.get("attempts"):
        return None
    _write(target, pack(run))
    return target


def _write(target: Path, rec: dict[str, Any]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    # mtime=0: the same record compresses to the same bytes (no spurious git diffs).
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(rec, sort_keys=True).encode())
    tmp.replace(target)


def rekey(records: Path, echo=print) -> list[tuple[str, str]]:
    """Moves records whose key is not their config's `runs.run_key` to that key.

    The records of runs keyed under an older keying (pipeline stages compared with
    the RL defaults, not their kind's) are found again this way, like
    `runs.adopt_legacy_runs` does for workdirs: the file is renamed (a `+weights`
    tag kept), its `key` and its manifest's key and `--workdir` are rewritten. A
    record whose new name is taken is left where it is.

    Returns:
      (old key, new key) per moved record.
    """
    moved = []
    for file in sorted(Path(records).glob(f"*{SUFFIX}")) if Path(records).is_dir() else []:
        rec = load(file)
        old, config = rec["key"], rec["config"]
        new = runs_lib.run_key(config, runs_lib.warm_start_names(config))
        target = file.with_name(file.name.replace(old, new, 1))
        if new == old or not file.name.startswith(old) or target.exists():
            continue
        rec["key"] = new
        manifest = rec["manifest"]
        manifest["key"] = new
        if "command" in manifest:
            manifest["command"] = manifest["command"].replace(f"/runs/{old}", f"/runs/{new}")
        _write(target, rec)
        file.unlink()
        moved.append((old, new))
        echo(f"  record {old} -> {new} (keyed by its config delta)")
    return moved


def load(file: Path) -> dict[str, Any]:
    """A record, checked for the fields `restore` needs.

    Raises:
      ValueError naming the file when it is not a record of this format.
    """
    try:
        with gzip.open(file, "rb") as f:
            rec = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise ValueError(f"{file}: not a readable run record ({e})") from e
    missing = [k for k in ("format", "key", "config", "manifest", "metrics") if k not in rec]
    if missing or rec["format"] != FORMAT:
        raise ValueError(
            f"{file}: not a run record of format {FORMAT} (missing {missing}, "
            f"format {rec.get('format')!r})"
        )
    return rec


def manifest_weights(manifest: dict[str, Any], config=None) -> dict[str, str]:
    """Warm-start name -> weight digest of a run manifest's last attempt that recorded them.

    With `config`, only the warm starts that config loads (`runs.weights_used`).
    """
    for attempt in reversed(manifest.get("attempts", [])):
        if attempt.get("warm_starts"):
            weights = dict(attempt["warm_starts"])
            return weights if config is None else runs_lib.weights_used(weights, config)
    return {}


def recorded_weights(rec: dict[str, Any]) -> dict[str, str]:
    """Warm-start name -> weight digest of the warm starts a record's run loaded."""
    return manifest_weights(rec["manifest"], rec["config"])


def _copy_of(held: dict[str, Any], loaded: list[tuple[Path, dict[str, Any]]]) -> str:
    """The record file (among `loaded`) that a workdir's manifest `held` is an unchanged
    copy of ("" for a run made here: no `restored_from`, or attempts added since)."""
    src = held.get("restored_from", "")
    same = any(
        f.name == src and c["manifest"].get("attempts") == held.get("attempts") for f, c in loaded
    )
    return src if src and same else ""


def _remove_copy(run: runs_lib.Run, copy: str) -> None:
    """Empties a workdir that only held a copy of a record (`copy` = its file name)."""
    if copy:
        for name in (METRICS, CONFIG, runs_lib.MANIFEST):
            (run.workdir / name).unlink(missing_ok=True)
        run.manifest = {}


# What `restore` did with a run.
RESTORED = "restored"
KEPT = "already restored"  # the workdir holds an unchanged copy of the chosen record
LOCAL = "local run"  # the workdir already holds a run started here
NO_RECORD = "no record"
OTHER_WEIGHTS = "trained on other warm-start weights than this machine's cache"
NOT_CACHED = "its warm starts are not cached here yet (restored once they are, if they match)"


def preferred_weights(runs: list[runs_lib.Run], records: Path) -> dict[str, str]:
    """The recorded warm-start weights that most of `runs` can be restored on (name -> digest).

    A record names the weights of the warm starts cached when its run started, so
    one machine's records name different subsets of its warm starts, and a page
    may use several bases (OC-GRPO: Countdown and arithmetic). Each set of weights
    some record names is scored by the number of the runs' keys with a record that
    agrees with it (no warm start named by both with other weights); ties go to
    the set naming more of the weights the repository ships (what a fresh clone
    installs: a page re-run on a shipped base keeps its old records beside the new
    ones, as many of each), then to the set naming more warm starts. The sets are
    then merged best first, each one that agrees with the merge so far, so every
    base of the page is pinned to the weights most of its runs share. With no warm
    start cached, a page restores every run on these weights, so its arms are
    compared on one base per warm start. Returns {} when no record names its weights.
    """
    per_key = [
        [recorded_weights(load(f)) for f in versions(records, key)] for key in {r.key for r in runs}
    ]
    candidates = {weights_tag(w): w for found in per_key for w in found if w}
    ships = {n: shipped.digest(n) for w in candidates.values() for n in w}  # hashed once

    def score(tag: str) -> tuple[int, int, int, str]:
        w = candidates[tag]
        agreeing = sum(any(v and not conflicts(v, w) for v in found) for found in per_key)
        on_shipped = sum(ships[name] == d for name, d in w.items())
        return agreeing, on_shipped, len(w), tag  # the tag makes a full tie deterministic

    merged: dict[str, str] = {}
    for tag in sorted(candidates, key=score, reverse=True):
        if not conflicts(candidates[tag], merged):
            merged.update(candidates[tag])
    return merged


def restore(
    run: runs_lib.Run,
    records: Path,
    local_weights: dict[str, str] | None = None,
    *,
    prefer: dict[str, str] | None = None,
    require_cached: bool = False,
) -> str:
    """Fills an empty workdir of `run` from one of its records; says what it did.

    Returns RESTORED when it filled the workdir, KEPT when it already held a copy
    of the chosen record, else why not: LOCAL, NO_RECORD, OTHER_WEIGHTS or NOT_CACHED.

    A workdir that already holds a config.json (a run started here, finished or
    not) is left alone: local runs win over records. A workdir that is only a
    copy of a record (`restored_from`, with that record's attempts) is chosen
    again like an empty one: another page sharing the run may have restored the
    version on other weights (its majority), and a copy that no longer fits is
    removed (it holds nothing the record lacks). A record trained on a warm start
    whose cached weights here differ (`local_weights`, name -> digest, default
    `runs.warm_start_digests`) is not restored: a retrained base makes its runs new
    measurements, not more seeds of the recorded ones. Among the versions that
    agree with the cache, the one matching `prefer` is taken, else the first.
    With `require_cached` (a harness about to train), a record is restored only
    when every warm start it names is cached here with its weights: a run that
    would train on a base not built yet is not mixed with recorded ones.

    Raises:
      ValueError naming the record when its key is not the run's.
    """
    held: dict[str, Any] = {}
    if (run.workdir / CONFIG).exists():
        held = runs_lib.read_manifest(run.workdir)
        if not held.get("restored_from"):
            return LOCAL
    loaded = []
    for file in versions(records, run.key):
        candidate = load(file)
        if candidate["key"] != run.key:
            raise ValueError(f"{file}: holds run {candidate['key']}, expected {run.key}")
        loaded.append((file, candidate))
    copy = _copy_of(held, loaded)
    if held and not copy:
        return LOCAL
    if not loaded:
        return NO_RECORD
    here = runs_lib.warm_start_digests(run.config) if local_weights is None else local_weights
    here = runs_lib.weights_used(here, run.config)
    fitting = [(f, c) for f, c in loaded if not conflicts(recorded_weights(c), here)]
    if not fitting:
        _remove_copy(run, copy)
        return OTHER_WEIGHTS
    src, rec = next(
        ((f, c) for f, c in fitting if prefer and not conflicts(recorded_weights(c), prefer)),
        fitting[0],
    )
    if require_cached and any(name not in here for name in recorded_weights(rec)):
        _remove_copy(run, copy)
        return NOT_CACHED
    if copy == src.name:
        run.manifest = held
        return KEPT
    run.workdir.mkdir(parents=True, exist_ok=True)
    (run.workdir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rec["metrics"]))
    (run.workdir / CONFIG).write_text(json.dumps(rec["config"], indent=2))
    manifest = dict(rec["manifest"], restored_from=src.name)
    (run.workdir / runs_lib.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    run.manifest = manifest
    return RESTORED
