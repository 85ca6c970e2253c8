"""Per-problem results kept on disk, so a stopped evaluation resumes where it stopped.

One jsonl file per (model, benchmark) under `<out>/cache/`; each line is one
problem's responses and verdicts with the key it was computed under:
sha256 of (model digest, benchmark, problem id, settings that change the
samples or verdicts, the rendered prompt). A line whose key differs (other
settings, an edited prompt template) is ignored, and a half-written last line
(a killed process) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_WEIGHT_SUFFIXES = (".safetensors", ".json", ".model", ".bin")


def model_digest(model_dir: Path) -> str:
    """sha256 over the names and bytes of a model directory's config, weight and tokenizer files.

    Reads every byte once (a few seconds per GB), so a retrained model in the same
    directory never reuses another's cached samples.
    """
    h = hashlib.sha256()
    files = sorted(
        p for p in Path(model_dir).iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES
    )
    if not files:
        raise FileNotFoundError(f"{model_dir}: no config, weight or tokenizer files to digest")
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def problem_key(model: str, benchmark: str, problem_id: str, settings: dict, prompt: str) -> str:
    """The cache key of one problem's results (hex sha256)."""
    blob = json.dumps([model, benchmark, problem_id, settings, prompt], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    """Append-only jsonl of per-problem records for one (model, benchmark)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            with open(self.path, "rb") as f:
                for line_no, line in enumerate(f, start=1):
                    try:
                        rec = json.loads(line)
                        self._records[rec["key"]] = rec
                    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                        logger.warning(
                            "%s, line %d: unreadable cache line skipped", self.path, line_no
                        )

    def get(self, key: str) -> dict[str, Any] | None:
        return self._records.get(key)

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Stores `record` under `key` and appends it to the file (flushed and fsynced)."""
        record = {"key": key, **record}
        self._records[key] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def __len__(self) -> int:
        return len(self._records)
