"""The runs of a reproduction: resolve each arm × seed to a config, key it, run or reuse it.

A run is keyed by a hash of its resolved config's *delta* (the fields whose
value differs from `rlvr_jax.rl.config.default_config()`, or for a pipeline from
each stage's kind defaults; seed included) and the
cache names of the warm-start models its domains use (a retrained warm start is
a new run). Keying on the delta keeps finished runs valid when a new config
field is added with a default (the behaviour of old runs is the default's).
Changing an existing default keeps the key of a config that relied on it, but
its finished run's config.json then differs from the resolved config and
`is_complete` refuses it, naming the field (move the run away to retrain it).
Runs made under the older full-config key are found by their config.json and
moved to their delta key (`adopt_legacy_runs`). A run's workdir is
`<root>/runs/<key>/`, so any two arms, of one page or of several, that resolve to
the same config and seed are one run: a baseline is trained once and shared.
Each workdir holds the trainer's files plus

  repro.json   the harness's record: key, command, arms that use it, and every
               attempt (start time, wall and CPU seconds, exit code, git commit)
  repro.log    the trainer's stdout/stderr, appended per attempt
  repro.lock   held by the harness process running it (`HARNESS_LOCK`)

A run is "done" when its metrics hold the final evaluation (step = train.steps)
and its config.json equals the resolved config; "crashed" when an attempt exited
non-zero (not retried unless asked: a deterministic crash would repeat);
"interrupted" when an attempt ended early without an error (a preemption: exit 0
or 75, or the harness interrupted); anything not done is resumed by rerunning
the same command (the trainer resumes from its workdir's last checkpoint).
Runs execute one at a time per harness. Two harness processes may share a root (two
pages, one per core): each holds `repro.lock` in a run's workdir while it runs it, and
the other skips that run ("running in another harness") and reads its manifest
afresh when it takes a run, so neither overwrites the other's record.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ml_collections

from rlvr_jax import pyfile
from rlvr_jax.locking import FileLock, HeldError
from rlvr_jax.pipeline import config as pipeline_config
from rlvr_jax.repro import pipelines
from rlvr_jax.repro.spec import Arm, Reproduction
from rlvr_jax.rl.config import default_config
from rlvr_jax.run.metrics_file import read_metrics
from rlvr_jax.train import warmstart, warmstart_shipped

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"
MANIFEST = "repro.json"
HARNESS_LOCK = "repro.lock"  # held by the harness process executing the run
TRAINER_LOCK = "run.lock"  # held by the trainer process (`run.run_io.LOCK_FILE`)
LOG = "repro.log"
DONE, CRASHED, INTERRUPTED, PENDING = "done", "crashed", "interrupted", "pending"
EXIT_PREEMPTED = 75  # rlvr_jax.main's exit status after a preemption signal (EX_TEMPFAIL)


@dataclasses.dataclass
class Run:
    """One arm × seed: what to run, where, and what happened."""

    arm: Arm
    seed: int
    config: dict[str, Any]  # the resolved config, as the trainer writes config.json
    key: str
    workdir: Path
    command: list[str]
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def steps(self) -> int:
        return pipelines.max_steps(self.config)

    @property
    def status(self) -> str:
        return self.manifest.get("status", PENDING)


def load_config(ref: str) -> ml_collections.ConfigDict:
    """`get_config(variant)` of `experiments/<path>[:variant]`, as `--config=` would load it."""
    path, _, variant = ref.partition(":")
    file = EXPERIMENTS / path
    if not file.is_file():
        raise FileNotFoundError(f"experiment config {file} does not exist (arm config {ref!r})")
    module = pyfile.load(file, f"_repro_cfg_{file.stem}")
    return module.get_config(variant) if variant else module.get_config()


def resolve(arm: Arm, seed: int, common: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """The arm's config with the common overrides, then its own, then the seed.

    Raises:
      ValueError naming the arm and field when a field does not exist or the
      value has the wrong type.
    """
    c = load_config(arm.config)
    for path, value in {**common, **arm.overrides, **pipelines.seed_fields(c, seed)}.items():
        *parents, leaf = path.split(".")
        node = c
        try:
            for p in parents:
                node = node[p]
            if leaf not in node:
                raise KeyError(leaf)
            node[leaf] = value
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"arm {arm.name!r} ({arm.config}): cannot set config.{path} = {value!r}: {e}"
            ) from e
    return c


def _flag_value(value: Any) -> str:
    return str(value)


def command(
    arm: Arm,
    seed: int,
    common: Mapping[str, Any],
    workdir: Path,
    seed_fields: Mapping[str, int] | None = None,
) -> list[str]:
    """The training command of one run (run from the repository root).

    `seed_fields`: the fields that carry the seed (default `seed`; a pipeline's are
    its stages' `run.seed`, `pipelines.seed_fields`).
    """
    workdir = Path(workdir)
    if workdir.is_absolute() and workdir.is_relative_to(REPO):
        workdir = workdir.relative_to(REPO)
    seeded = {"seed": seed} if seed_fields is None else seed_fields
    overrides = {**common, **arm.overrides, **seeded}
    return [
        "python",
        "-m",
        "rlvr_jax.main",
        f"--config=experiments/{arm.config}",
        f"--workdir={workdir}",
        *(f"--config.{k}={_flag_value(v)}" for k, v in overrides.items()),
    ]


@functools.cache
def _cache_name(domain: str, role: str) -> str:
    """The cache directory name of the registered warm start (domain, role)."""
    return warmstart.model_dir(warmstart.SPECS[domain, role], warmstart.default_tokenizer()).name


def _warm_start_dirs(domain: str) -> tuple[str, ...]:
    """Cache directory names of the registered warm starts of `domain` (every role)."""
    return tuple(_cache_name(domain, r) for r in warmstart.ROLES if (domain, r) in warmstart.SPECS)


def warm_start_names(config: dict[str, Any]) -> list[str]:
    """Cache directory names of the warm-start models of every domain the config names.

    A domain is any `*.domain` field holding a registered warm-start domain
    (the policy's, a teacher's); both roles of each are listed, so a retrained
    base or teacher changes the run key.
    """
    if config["model"]["source"] != "warm_start":
        return []
    known, found = set(warmstart.domains()), set()

    def walk(node):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v)
            elif k == "domain" and v in known:
                found.add(v)

    walk(config)
    return sorted(name for d in found for name in _warm_start_dirs(d))


# Score signals that load a warm-start model by their own (source, domain, role) options.
_TEACHER_SIGNALS = ("teacher", "teacher_hidden", "teacher_topk")


def used_warm_starts(config: Mapping[str, Any]) -> set[str] | None:
    """Cache names of the warm starts a run loads: the policy's, its teachers', its judge's.

    The run key names every role of every domain a config mentions
    (`warm_start_names`), and an attempt records the weights of all of them that
    were cached; comparing weights over this set instead keeps a base the run never
    loaded (a Countdown GRPO run and the privileged Countdown role) from splitting
    a page's runs. None when it cannot tell (a pipeline, MOPD's per-domain teachers,
    a config without a model block): then every recorded name counts.
    """
    if pipelines.is_pipeline(config) or "model" not in config:
        return None
    model, score = config["model"], config.get("score", {})
    names = [s.strip() for s in str(score.get("signals", "")).split(",") if s.strip()]
    if "mopd" in names:
        return None
    used = set()
    if model.get("source") == "warm_start":
        used.add((model["domain"], model["role"]))
    for name in names:
        o = score.get(name, {})
        if name in _TEACHER_SIGNALS and o.get("source") == "warm_start":
            used.add((o.get("domain") or model["domain"], o["role"]))
        elif name == "first_mistake" and o.get("locator") == "judge":
            used.add((o.get("judge_domain") or model["domain"], o.get("judge_role", "judge")))
    return {_cache_name(d, r) for d, r in used if (d, r) in warmstart.SPECS}


def _registered_names() -> frozenset[str]:
    return frozenset(_cache_name(d, r) for d, r in warmstart.SPECS)


def weights_used(weights: Mapping[str, str], config: Mapping[str, Any]) -> dict[str, str]:
    """`weights` (name -> digest) without the registered warm starts `config` does not load."""
    used = used_warm_starts(config)
    if used is None:
        return dict(weights)
    unused = _registered_names() - used
    return {k: v for k, v in weights.items() if k not in unused}


def warm_start_digests(config: dict[str, Any]) -> dict[str, str]:
    """sha256 (12 hex digits) of each cached warm-start model the config uses.

    The run key names a warm start by its spec, not its weights; a warm start
    retrained on another machine (SFT on CPU is not bit-reproducible across
    machines) keeps its name, so each attempt records the weights it found.
    Models not in the cache are left out.
    """
    root = warmstart.DEFAULT_CACHE_DIR.expanduser()
    return {
        name: warmstart_shipped.weights_digest(root / name)
        for name in warm_start_names(config)
        if (root / name / "model.safetensors").is_file()
    }


def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in node.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


PIPELINE = "<pipeline>"  # `_default_flat`'s name for a pipeline's own (non-stage) fields


# Library defaults that changed after pages were recorded, keyed and run as their old
# value: run path (in an RL config; a stage's is under "run.") -> the old default. A
# config holding the old value keeps its key, so recorded runs are found again; one
# holding the new default has it in its delta. The harness runs every arm that leaves
# the field at the new default with the old value (`recorded_defaults`), so a page's new
# seeds run as its recorded ones did. model.attention: "xla" -> "auto" (issue 32; "auto"
# is "xla" below 256 key slots, every recorded miniature run's lengths).
RECORDED_DEFAULTS = {"model.attention": "xla"}


@functools.cache
def _default_flat(kind: str = "") -> tuple[tuple[str, str], ...]:
    """The flattened defaults of an RL run config, a pipeline's own, or one stage kind's
    (each field of `RECORDED_DEFAULTS` as its old value)."""
    if kind == PIPELINE:
        defaults = pipeline_config.pipeline_config()
    elif kind:
        defaults = pipeline_config.stage_config(kind)
    else:
        defaults = default_config()
    flat = _flatten(json.loads(defaults.to_json()))
    prefix = "run." if kind and kind != PIPELINE else ""
    for path, old in RECORDED_DEFAULTS.items():
        if prefix + path in flat:
            flat[prefix + path] = old
    return tuple((k, json.dumps(v, sort_keys=True)) for k, v in sorted(flat.items()))


def recorded_defaults(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Overrides that run `config` as the pages were recorded: each `RECORDED_DEFAULTS`
    field (an RL run's, or every stage's) still at the library's new default -> its old
    value. A page's common or arm overrides come after these and win."""
    c = json.loads(config.to_json())
    if pipelines.is_pipeline(c):
        runs = [(f"stages.{n}.run.", s["run"], s["kind"]) for n, s in c["stages"].items()]
    else:
        runs = [("", c, "")]
    out = {}
    for prefix, run, kind in runs:
        flat = _flatten(run)
        for path, old in RECORDED_DEFAULTS.items():
            new = _kind_default(kind, path)
            if path in flat and flat[path] == new != old:
                out[prefix + path] = old
    return out


@functools.cache
def _kind_default(kind: str, path: str) -> Any:
    """The library's current default of `path` in an RL config (kind "") or a stage kind's
    run config (None where it has no such field)."""
    defaults = pipeline_config.stage_config(kind).run if kind else default_config()
    return _flatten(json.loads(defaults.to_json())).get(path)


def _defaults_of(config: Mapping[str, Any]) -> dict[str, str]:
    """Flat path -> default (JSON) for every field of `config` that has a library default.

    A pipeline's stages are compared with their own kind's defaults
    (`pipeline.config.stage_config(kind)`), so an option added to one kind, or to
    the RL config every RL-kind stage runs, keeps the keys of finished pipeline
    runs. A stage's `kind` is always part of the delta (two stages of different
    kinds that both keep their defaults are different runs).
    """
    if not pipelines.is_pipeline(config):
        return dict(_default_flat())
    out = dict(_default_flat(PIPELINE))
    for name, stage in config["stages"].items():
        for k, v in _default_flat(stage["kind"]):
            if k != "kind":
                out[f"stages.{name}.{k}"] = v
    return out


def config_delta(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `config` (as in config.json) that differ from the library defaults.

    A field the defaults lack (an experiment's own subtree, a pipeline's own
    fields) is part of the delta; a default field the config lacks (added to the
    library after the run) is not.
    """
    defaults = _defaults_of(config)
    return {
        k: v
        for k, v in sorted(_flatten(config).items())
        if defaults.get(k) != json.dumps(v, sort_keys=True)
    }


def run_key(config: dict[str, Any], warm_starts: list[str]) -> str:
    """16 hex digits of sha256 over the config's delta (seed included) and warm starts."""
    payload = json.dumps(
        {"delta": config_delta(config), "warm_starts": warm_starts}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def adopt_legacy_runs(root: Path, echo=print) -> list[tuple[str, str]]:
    """Moves run directories whose name is not their delta key to that key.

    Directories made under an older keying (a hash of the full config) are
    found again this way when fields were added since. A directory is left where
    it is when its config.json is unreadable, the target already exists, or a live
    harness or trainer holds it (it may run other code, which keys the config
    differently: a harness of older code once moved runs mid-training this way).

    Returns:
      (old name, new name) per moved directory.
    """
    runs_dir = Path(root) / "runs"
    moved = []
    if not runs_dir.is_dir():
        return moved
    for d in sorted(runs_dir.iterdir()):
        cfg = d / "config.json"
        if not cfg.is_file():
            continue
        try:
            config = json.loads(cfg.read_text())
        except (OSError, ValueError):
            continue
        key = run_key(config, warm_start_names(config))
        target = runs_dir / key
        if key == d.name or target.exists():
            continue
        # A run another harness is executing stays where it is: that harness may run other
        # code, which keys the run's config differently (a field it does not know yet).
        locks = [FileLock(d / name, what=f"run {d}") for name in (HARNESS_LOCK, TRAINER_LOCK)]
        try:
            for lock in locks:
                lock.acquire()
        except HeldError:
            continue
        else:
            d.rename(target)
        finally:
            for lock in locks:
                lock.release()
        moved.append((d.name, key))
        echo(f"  run {d.name} -> {key} (keyed by its config delta)")
    return moved


def plan(repro: Reproduction, seeds: list[int], root: Path) -> list[Run]:
    """Every arm × seed of `repro`, resolved and keyed, with its manifest if one exists."""
    root = Path(root).resolve()
    adopt_legacy_runs(root, echo=lambda *_: None)
    runs = []
    for arm in repro.arms:
        common = {**recorded_defaults(load_config(arm.config)), **repro.common}
        for seed in seeds:
            config = json.loads(resolve(arm, seed, common).to_json())
            key = run_key(config, warm_start_names(config))
            workdir = Path(root) / "runs" / key
            manifest = read_manifest(workdir)
            cmd = command(arm, seed, common, workdir, pipelines.seed_fields(config, seed))
            runs.append(Run(arm, seed, config, key, workdir, cmd))
            runs[-1].manifest = manifest
    return runs


def read_manifest(workdir: Path) -> dict[str, Any]:
    path = Path(workdir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_manifest(run: Run) -> None:
    run.workdir.mkdir(parents=True, exist_ok=True)
    tmp = run.workdir / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(run.manifest, indent=2, sort_keys=True))
    tmp.replace(run.workdir / MANIFEST)


def is_complete(run: Run) -> bool:
    """The final evaluation is logged and config.json is the resolved config.

    A pipeline's metrics.jsonl is joined from its stages here (`pipelines.write_metrics`)
    once every stage is evaluated; it is final when it holds the last stage's evaluation.
    """
    metrics, config = run.workdir / "metrics.jsonl", run.workdir / "config.json"
    pipeline = pipelines.is_pipeline(run.config)
    if pipeline and config.is_file():
        pipelines.write_metrics(run.workdir, run.config)
    if not (metrics.is_file() and config.is_file()):
        return False
    records = read_metrics(metrics)
    if pipeline:
        final = pipelines.is_finished(records, run.config)
    else:
        final = [r for r in records if r["split"] == "eval" and r["step"] == run.steps]
    if not final:
        return False
    have, want = config_delta(json.loads(config.read_text())), config_delta(run.config)
    # A field the harness's resolved config lacks was added to the library after this
    # harness process started (its code is older than the run's): the run wrote its
    # default, so it is no difference (the next harness keys it as usual).
    known = _flatten(run.config)
    have = {k: v for k, v in have.items() if k in known or k in want}
    if have != want:
        fields = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        raise ValueError(
            f"{config} differs from the config the harness resolved for arm {run.arm.name!r} "
            f"seed {run.seed} in {', '.join(fields[:8])}: a library default changed since the "
            "run, or the command-line overrides do not parse to the same values; move the "
            "workdir away to retrain it"
        )
    return True


def git_commit() -> str:
    """HEAD's commit, with "+dirty" when tracked code differs from it.

    The pages the harness itself rewrites (docs/) do not count: a run's code is
    rlvr_jax/, experiments/ and scripts/.
    """

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    return head + (
        "+dirty"
        if git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "rlvr_jax",
            "experiments",
            "scripts",
        )
        else ""
    )


def machine() -> str:
    """CPU model and count of this machine, in words."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


Launcher = Callable[[Run, Any], int]


def pin_prefix(pin: str, nice: int) -> list[str]:
    """`taskset -c <pin> nice -n <nice>` (empty without `pin`)."""
    return ["taskset", "-c", pin, "nice", "-n", str(nice)] if pin else []


def subprocess_launcher(pin: str = "", nice: int = 10) -> Launcher:
    """Runs the command (pinned to CPUs `pin` at `nice` when given), output to `log`."""
    prefix = pin_prefix(pin, nice)

    def launch(run: Run, log) -> int:
        cmd = prefix + [sys.executable] + run.command[1:]
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # the log follows the run
        return subprocess.run(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
        ).returncode

    return launch


def _label(run: Run) -> str:
    return f"{run.arm.name} ({run.arm.config})"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _log_tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def execute(
    run: Run, launch: Launcher, *, retry_crashed: bool = False, how: str = "", echo=print
) -> None:
    """Brings one run to done (or records why not), updating its manifest in place.

    Args:
      run: the run (its manifest is updated and written).
      launch: executes the run's command, writing its output to the given file.
      retry_crashed: resume a run whose last attempt crashed.
      how: how the command is run (e.g. "taskset -c 1 nice -n 10"), recorded per attempt.
      echo: progress lines.
    """
    run.workdir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run.workdir / HARNESS_LOCK, what=f"reproduction run {run.workdir}")
    try:
        lock.acquire()
    except HeldError as err:
        echo(f"  {run.arm.name} seed {run.seed}: running in another harness, skipped ({err})")
        return
    try:
        # Another harness may have run it since `plan` read the manifest.
        run.manifest = read_manifest(run.workdir) or run.manifest
        _execute_held(run, launch, retry_crashed=retry_crashed, how=how, echo=echo)
    finally:
        lock.release()


def _execute_held(run: Run, launch: Launcher, *, retry_crashed: bool, how: str, echo) -> None:
    """`execute` with the run's harness lock held."""
    m = run.manifest
    m.setdefault("key", run.key)
    m["command"] = " ".join(run.command)  # the workdir may have moved (adopt_legacy_runs)
    m.setdefault("attempts", [])
    m["seed"] = run.seed
    m["arms"] = sorted(set(m.get("arms", [])) | {_label(run)})
    if is_complete(run):
        if m.get("status") != DONE:
            m["status"] = DONE
        _write_manifest(run)
        return
    if m.get("status") == CRASHED and not retry_crashed:
        echo(f"  {run.arm.name} seed {run.seed}: crashed before; not retried ({run.workdir})")
        return
    echo(
        f"  {run.arm.name} seed {run.seed}: {'resuming' if m['attempts'] else 'starting'} "
        f"{run.workdir}"
    )
    attempt = {
        "start": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": machine(),
        "how": how,
    }
    m["attempts"].append(attempt)
    m["status"] = "running"
    _write_manifest(run)
    cpu0, t0 = _children_cpu(), time.perf_counter()
    try:
        with open(run.workdir / LOG, "a") as log:
            rc = launch(run, log)
    except KeyboardInterrupt:
        rc = None
    attempt.update(wall_s=time.perf_counter() - t0, cpu_s=_children_cpu() - cpu0, rc=rc)
    attempt["warm_starts"] = warm_start_digests(run.config)  # trained by the run if missing
    if rc is None:
        m["status"] = INTERRUPTED
        _write_manifest(run)
        raise KeyboardInterrupt
    if rc not in (0, EXIT_PREEMPTED):
        m["status"] = CRASHED
        attempt["log_tail"] = _log_tail(run.workdir / LOG)
    else:
        m["status"] = DONE if is_complete(run) else INTERRUPTED
    _write_manifest(run)
    echo(
        f"  {run.arm.name} seed {run.seed}: {m['status']} after {attempt['wall_s']:.0f} s wall, "
        f"{attempt['cpu_s']:.0f} s CPU"
    )


def execute_all(runs: list[Run], launch: Launcher, *, prepare=None, **kwargs) -> None:
    """Executes each distinct run once; arms that resolve to the same run share it.

    Seed by seed (every arm's seed 0, then every arm's seed 1, ...): a page cut
    short has whole seeds, and a verdict needs two seeds in each arm. `prepare(run)`,
    when given, is called just before each distinct run is executed (the harness
    restores a record there once the run's warm starts are cached).
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.key, []).append(run)
    for same in sorted(groups.values(), key=lambda g: g[0].seed):
        first = same[0]
        labels = {_label(r) for r in same}
        if prepare is not None:
            prepare(first)
        first.manifest["arms"] = sorted(set(first.manifest.get("arms", [])) | labels)
        execute(first, launch, **kwargs)
        for other in same[1:]:
            other.manifest = first.manifest


def wall_seconds(manifest: dict[str, Any]) -> float:
    return float(sum(a.get("wall_s", 0.0) for a in manifest.get("attempts", [])))


def cpu_seconds(manifest: dict[str, Any]) -> float:
    return float(sum(a.get("cpu_s", 0.0) for a in manifest.get("attempts", [])))
