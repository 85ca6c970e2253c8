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
under the same name is visible in the attempts' digests (the page flags it).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.run.report import read_metrics

SUFFIX = ".json.gz"
FORMAT = 1
CONFIG, METRICS = "config.json", "metrics.jsonl"


def path(records: Path, key: str) -> Path:
    return Path(records) / f"{key}{SUFFIX}"


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
    A run restored from a record is not written back.

    Returns:
      The path written, or None.
    """
    if run.status != runs_lib.DONE or run.manifest.get("restored_from"):
        return None
    target = path(records, run.key)
    if target.is_file():
        old = load(target)
        if old["manifest"].get("attempts") == run.manifest.get("attempts"):
            return None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    # mtime=0: the same record compresses to the same bytes (no spurious git diffs).
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(pack(run), sort_keys=True).encode())
    tmp.replace(target)
    return target


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


def recorded_weights(rec: dict[str, Any]) -> dict[str, str]:
    """Warm-start name -> weight digest of the record's last attempt that recorded them."""
    for attempt in reversed(rec["manifest"].get("attempts", [])):
        if attempt.get("warm_starts"):
            return dict(attempt["warm_starts"])
    return {}


# What `restore` did with a run.
RESTORED = "restored"
LOCAL = "local run"  # the workdir already holds a run started here
NO_RECORD = "no record"
OTHER_WEIGHTS = "trained on other warm-start weights than this machine's cache"


def restore(run: runs_lib.Run, records: Path, local_weights: dict[str, str] | None = None) -> str:
    """Fills an empty workdir of `run` from its record; says what it did.

    Returns RESTORED when it filled the workdir, else why not: LOCAL, NO_RECORD or
    OTHER_WEIGHTS.

    A workdir that already holds a config.json (a run started here, finished or
    not) is left alone: local runs win over records. So is a record trained on a
    warm start whose cached weights here differ (`local_weights`, name -> digest,
    default `runs.warm_start_digests`): a retrained base makes its runs new
    measurements, not more seeds of the recorded ones.

    Raises:
      ValueError naming the record when its key is not the run's.
    """
    src = path(records, run.key)
    if (run.workdir / CONFIG).exists():
        return LOCAL
    if not src.is_file():
        return NO_RECORD
    rec = load(src)
    if rec["key"] != run.key:
        raise ValueError(f"{src}: holds run {rec['key']}, expected {run.key}")
    here = runs_lib.warm_start_digests(run.config) if local_weights is None else local_weights
    then = recorded_weights(rec)
    if any(name in here and here[name] != digest for name, digest in then.items()):
        return OTHER_WEIGHTS
    run.workdir.mkdir(parents=True, exist_ok=True)
    (run.workdir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rec["metrics"]))
    (run.workdir / CONFIG).write_text(json.dumps(rec["config"], indent=2))
    manifest = dict(rec["manifest"], restored_from=src.name)
    (run.workdir / runs_lib.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    run.manifest = manifest
    return RESTORED
