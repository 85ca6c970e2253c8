"""Loads a reproduction declaration, runs its arms × seeds, and writes its page.

  reproduce(load_reproduction("sara"), seeds=[0, 1, 2], root="runs/repro", pin="1")

Runs are shared and resumed as `rlvr_jax.repro.runs` describes; the page is
`docs/reproductions/<slug>.md` (`rlvr_jax.repro.page`).
"""

from __future__ import annotations

from pathlib import Path

from rlvr_jax import pyfile
from rlvr_jax.repro import page as page_lib
from rlvr_jax.repro import records as records_lib
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro import sweeps as sweeps_lib
from rlvr_jax.repro.results import collect
from rlvr_jax.repro.spec import Reproduction

REPRO_FILE = "repro.py"


def declared_slugs(experiments: Path = runs_lib.EXPERIMENTS) -> list[str]:
    """The experiment directories that declare a reproduction, sorted."""
    return sorted(p.parent.name for p in Path(experiments).glob(f"*/{REPRO_FILE}"))


def load_reproduction(slug: str, experiments: Path = runs_lib.EXPERIMENTS) -> Reproduction:
    """`get_reproduction()` of `experiments/<slug>/repro.py`.

    Raises:
      FileNotFoundError listing the slugs that declare one.
    """
    file = Path(experiments) / slug / REPRO_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} does not exist; reproductions: {', '.join(declared_slugs(experiments))}"
        )
    repro = pyfile.load(file, f"_repro_{slug}").get_reproduction()
    if repro.slug != slug:
        raise ValueError(f"{file}: declares slug {repro.slug!r}, expected {slug!r}")
    return repro


def _restore_all(runs, trained, records: Path, prefer, some_arms: bool, echo) -> int:
    """Fills each run's workdir from its record where it can; returns how many were."""
    restored = 0
    for r in runs:
        # Training: only records on the weights cached here (a base built by this
        # harness's first run is checked again before each later run, `prepare`).
        # An arm left untrained (`arms`) is read from its records whatever is cached here.
        kept = {} if some_arms and r not in trained else None
        outcome = records_lib.restore(r, records, kept, prefer=prefer, require_cached=r in trained)
        restored += outcome in (records_lib.RESTORED, records_lib.KEPT)
        if outcome == records_lib.OTHER_WEIGHTS:
            echo(
                f"  {r.arm.name} seed {r.seed}: record {r.key} {outcome}; not restored (a new run)"
            )
    for r in runs:  # arms sharing a restored (or removed) copy read its manifest too
        r.manifest = runs_lib.read_manifest(r.workdir)
    return restored


def _run_phase(
    repro: Reproduction,
    seeds: list[int],
    root: Path,
    records: Path,
    *,
    train_arms: set[str] | None,
    launch,
    pin: str,
    nice: int,
    retry_crashed: bool,
    echo,
) -> list[runs_lib.Run]:
    """Restores, trains (the arms in `train_arms`; None = no training) and records
    every arm × seed of `repro`; returns the runs with their manifests read afresh."""
    runs = runs_lib.plan(repro, seeds, root)
    prefer = records_lib.preferred_weights(runs, records)
    names = {a.name for a in repro.arms}
    some = train_arms is not None and train_arms != names
    trained = [r for r in runs if train_arms is not None and r.arm.name in train_arms]
    restored = _restore_all(runs, trained, records, prefer, some, echo)
    echo(
        f"{repro.slug}: {len(runs)} runs ({len({r.key for r in runs})} distinct"
        + (f", {restored} restored from {records}" if restored else "")
        + ")"
    )
    if train_arms is not None:
        how = " ".join(runs_lib.pin_prefix(pin, nice)) or "not pinned"
        launch = launch or runs_lib.subprocess_launcher(pin, nice)

        def prepare(run: runs_lib.Run) -> None:
            if records_lib.restore(run, records, prefer=prefer, require_cached=True) == (
                records_lib.RESTORED
            ):
                echo(f"  {run.arm.name} seed {run.seed}: restored from its record")

        runs_lib.execute_all(
            trained, launch, prepare=prepare, retry_crashed=retry_crashed, how=how, echo=echo
        )
    for r in runs:
        # Read afresh: another harness may have run it meanwhile, or finished one this one
        # skipped as held (its last attempt's warm starts are written when it ends; a stale
        # copy would record none).
        r.manifest = runs_lib.read_manifest(r.workdir) or r.manifest
        if r not in trained and r.status != runs_lib.DONE and runs_lib.is_complete(r):
            r.manifest["status"] = runs_lib.DONE  # finished, with a manifest that predates it
    for r in runs:
        records_lib.save(r, records)
    return runs


def reproduce(
    repro: Reproduction,
    seeds: list[int],
    root: str | Path,
    *,
    launch: runs_lib.Launcher | None = None,
    pin: str = "",
    nice: int = 10,
    train: bool = True,
    retry_crashed: bool = False,
    docs: Path = page_lib.DOCS,
    records: Path | None = None,
    plot: bool = True,
    arms: tuple[str, ...] = (),
    echo=print,
) -> Path:
    """Runs (or reuses) every arm × seed of `repro` and writes its page.

    A page with sweeps (`spec.Sweep`) first runs their candidates, chooses each
    swept arm's value on the validation split (`rlvr_jax.repro.sweeps`), then runs
    the arms with the chosen values; a swept arm whose candidates are not all
    finished is not trained (its page row waits for the sweep).

    Args:
      repro: the declaration.
      seeds: the seeds every arm runs with.
      root: where runs live (`<root>/runs/<key>/`).
      launch: how a run's command is executed (default: a subprocess, pinned to
        CPUs `pin` at niceness `nice` when `pin` is given).
      train: False only tabulates what exists (no run is started or resumed).
      retry_crashed: resume runs whose last attempt crashed.
      docs: the directory of the pages.
      records: where finished runs are kept in the repository (`rlvr_jax.repro.records`;
        default `<docs>/records`): a run missing under `root` is restored from its
        record, and every finished run's record is written.
      plot: also draw the curves.
      arms: train only these arms' runs (default every arm; a swept arm's candidates
        with it); the others are
        tabulated from what exists or their records (whatever warm starts are
        cached here), so an arm is added to a page without retraining the rest
        (each claim still gets no verdict when its two arms started from different
        warm-start weights).
    Returns:
      The page's path.
    """
    records = Path(records) if records is not None else Path(docs) / "records"
    records_lib.rekey(records, echo=lambda *_: None)
    unknown = sorted(set(arms) - {a.name for a in repro.arms})
    if unknown:
        raise ValueError(f"{repro.slug}: no arm {unknown}; arms: {[a.name for a in repro.arms]}")
    wanted = set(arms or (a.name for a in repro.arms)) if train else None
    kw = dict(launch=launch, pin=pin, nice=nice, retry_crashed=retry_crashed, echo=echo)
    choices = {}
    candidates = sweeps_lib.sweep_reproduction(repro)
    if candidates is not None:
        train_candidates = None
        if wanted is not None:
            train_candidates = {
                sweeps_lib.candidate(repro.arm(s.arm), s, v).name
                for s in repro.sweeps
                for v in s.values
                if s.arm in wanted
            }
        seeds_c = sweeps_lib.seeds(repro)
        swept = _run_phase(
            candidates, seeds_c, Path(root), records, train_arms=train_candidates, **kw
        )
        choices = sweeps_lib.choose(repro, collect(candidates, swept))
        repro = sweeps_lib.resolve(repro, choices)
        if wanted is not None:
            waiting = sweeps_lib.unchosen(choices) & wanted
            for arm in sorted(waiting):
                echo(f"  {arm}: its sweep is not finished; the arm is not trained")
            wanted -= waiting
    runs = _run_phase(repro, seeds, Path(root), records, train_arms=wanted, **kw)
    results = collect(repro, runs)
    return page_lib.write_page(
        repro, results, seeds=seeds, root=str(root), docs=docs, plot=plot, choices=choices
    )
