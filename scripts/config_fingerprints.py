"""Fingerprints of every experiment: its resolved configs, and optionally a short pulse of each.

A refactor that must not change behaviour (issue 30's plug-in redesign) is checked by
running this script before and after it and comparing the two JSON files:

  python scripts/config_fingerprints.py configs --out before.json
  python scripts/config_fingerprints.py pulses --steps 3 --parity --out pulses_before.json
  python scripts/config_fingerprints.py compare before.json after.json

`configs` resolves every experiment file's variants ("", "arithmetic", "pulse",
"paper", and each of its arms alone and with "pulse") to `config.to_dict()`, or to
the error the config raised. `pulses` trains every `:pulse` variant for `--steps`
RL steps on a tiny random model (CPU, ~10-60 s each) and records its metrics lines
(timings dropped) and a digest of its exported weights; a finished experiment is
cached in the output file, so a stopped run resumes. A random model never solves a
task (every group all-wrong: no update runs), so `--parity` rewards each row by the
parity of its tokens and votes in SpyRL's games by `rlvr_jax.testing.parity_vote`, as
the pulse tests do: groups differ and every stage's update really runs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
BASE_VARIANTS = ("", "arithmetic", "pulse", "paper")
# Metric keys that measure time or throughput (differ run to run, not behaviour).
TIMING = re.compile(r"(time|_s$|/s$|seconds|per_s|throughput|wall|elapsed|eta|cpu)")


def experiment_files() -> list[str]:
    return sorted(
        f"{p.parent.name}/{p.stem}"
        for p in EXPERIMENTS.glob("*/*.py")
        if "def get_config" in p.read_text()
    )


def load_module(name: str):
    path = EXPERIMENTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name.replace("/", "."), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variants_of(module) -> list[str]:
    arms = list(getattr(module, "ARMS", {}) or {})
    out = list(BASE_VARIANTS)
    for arm in arms:
        out += [arm, f"{arm},pulse"]
    return out


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def resolve_configs() -> dict:
    out = {}
    for name in experiment_files():
        module = load_module(name)
        for variant in variants_of(module):
            try:
                c = module.get_config(variant)
            except Exception as err:  # noqa: BLE001 - the error is the fingerprint
                out[f"{name}:{variant}"] = f"error: {type(err).__name__}: {err}"
                continue
            out[f"{name}:{variant}"] = {"config": _plain(c.to_dict()), "validate": _validate(c)}
    return out


def _validate(c) -> str:
    """ "ok", or the error `validate` raises on the config (RL or pipeline)."""
    from rlvr_jax.pipeline import config as pipeline_config
    from rlvr_jax.rl import config as rl_config

    check = pipeline_config.validate if pipeline_config.is_pipeline(c) else rl_config.validate
    try:
        check(c)
    except Exception as err:  # noqa: BLE001 - the error is the fingerprint
        return f"error: {type(err).__name__}: {err}"
    return "ok"


def _digest_dir(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*.safetensors")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def pulse(name: str, steps: int) -> dict:
    from rlvr_jax.pipeline.config import is_pipeline
    from rlvr_jax.rl.trainer import train

    module = load_module(name)
    c = module.get_config("pulse")
    with c.unlocked():
        if "train" in c and "steps" in c.train:
            c.train.steps = steps
    run = train
    if is_pipeline(c):
        from rlvr_jax.pipeline.run import run
    with tempfile.TemporaryDirectory() as tmp:
        result = run(c, tmp)
        lines = []
        for f in sorted(Path(tmp).rglob("metrics.jsonl")):
            for line in f.read_text().splitlines():
                row = json.loads(line)
                lines.append({k: v for k, v in sorted(row.items()) if not TIMING.search(k)})
        weights = _digest_dir(Path(tmp))
    keep = {k: v for k, v in result.items() if not TIMING.search(str(k))}
    return {"metrics": _plain(lines), "weights": weights, "result": _plain(keep)}


def use_parity_rewards() -> None:
    """Every verifier replaced by the token-parity one (and SpyRL's vote parser)."""
    from rlvr_jax import testing
    from rlvr_jax.rollout import score, self_play

    score.score_rows = testing.parity_score_rows
    self_play.parse_vote = testing.parity_vote


def run_pulses(out_path: Path, steps: int, only: list[str]) -> dict:
    done = json.loads(out_path.read_text()) if out_path.exists() else {}
    for name in only or experiment_files():
        if name in done:
            continue
        t0 = time.process_time()
        try:
            done[name] = pulse(name, steps)
        except Exception as err:  # noqa: BLE001 - the error is the fingerprint
            done[name] = f"error: {type(err).__name__}: {err}"
        print(f"{name}: {time.process_time() - t0:.0f} CPU s", flush=True)
        out_path.write_text(json.dumps(done, indent=1, sort_keys=True))
    return done


def compare(a: dict, b: dict) -> list[str]:
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            diffs.append(f"{key}: only in {'after' if key not in a else 'before'}")
        elif a[key] != b[key]:
            diffs.append(f"{key}: differs ({_first_difference(a[key], b[key])})")
    return diffs


def _first_difference(x, y, path="") -> str:
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if x.get(k, "<missing>") != y.get(k, "<missing>"):
                return _first_difference(
                    x.get(k, "<missing>"), y.get(k, "<missing>"), f"{path}.{k}"
                )
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            if u != v:
                return _first_difference(u, v, f"{path}[{i}]")
    return f"{path or 'value'}: {str(x)[:200]} != {str(y)[:200]}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=("configs", "pulses", "compare"))
    p.add_argument("files", nargs="*", help="compare: two JSON files; pulses: experiments")
    p.add_argument("--out", type=Path)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--parity", action="store_true", help="pulses: token-parity rewards")
    args = p.parse_args(argv)
    if args.mode == "configs":
        args.out.write_text(json.dumps(resolve_configs(), indent=1, sort_keys=True))
        return 0
    if args.mode == "pulses":
        if args.parity:
            use_parity_rewards()
        run_pulses(args.out, args.steps, args.files)
        return 0
    a, b = (json.loads(Path(f).read_text()) for f in args.files)
    diffs = compare(a, b)
    print("\n".join(diffs) or f"identical: {len(a)} entries")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
