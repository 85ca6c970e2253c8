"""Runs a seed paper's miniature reproduction and writes its page, or rebuilds the summary.

  python scripts/reproduce.py sara [--seeds 0,1,2] [--root runs/repro] [--pin 1]
  python scripts/reproduce.py --all        # docs/reproductions.md + the README's counts

The arms, metrics and claims are declared in experiments/<slug>/repro.py. Every
arm × seed is `python -m rlvr_jax.main --config=experiments/<arm config> ...`
in `<root>/runs/<hash of the resolved config + seed>/`: finished runs are reused
(a baseline shared by several pages is trained once), unfinished ones resumed.
The page is docs/reproductions/<slug>.md (+ .png curves, .json summary); each
finished run is kept as docs/reproductions/records/<key>.json.gz, from which a
fresh clone restores it (`--no-train` rebuilds the pages without training).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr_jax.repro import declared_slugs, load_reproduction, reproduce
from rlvr_jax.repro.page import DOCS
from rlvr_jax.repro.summary import write_summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("slugs", nargs="*", help=f"reproductions: {', '.join(declared_slugs())}")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds of every arm")
    p.add_argument("--root", default="runs/repro", help="where the runs live")
    p.add_argument("--pin", default="", help="CPU list for taskset (e.g. 1); '' = not pinned")
    p.add_argument("--nice", type=int, default=10, help="niceness of pinned runs")
    p.add_argument("--no-train", action="store_true", help="only tabulate the finished runs")
    p.add_argument("--retry-crashed", action="store_true", help="resume runs that crashed")
    p.add_argument("--docs", default=str(DOCS), help="directory of the pages")
    p.add_argument("--records", default="", help="run records (default: <docs>/records)")
    p.add_argument("--all", action="store_true", help="rewrite docs/reproductions.md")
    p.add_argument(
        "--arms", default="", help="comma-separated arms to train (others only tabulated)"
    )
    args = p.parse_args()
    if not args.slugs and not args.all:
        p.error("name a reproduction or pass --all")
    seeds = [int(s) for s in args.seeds.split(",")]
    for slug in args.slugs:
        page = reproduce(
            load_reproduction(slug),
            seeds,
            args.root,
            pin=args.pin,
            nice=args.nice,
            train=not args.no_train,
            retry_crashed=args.retry_crashed,
            docs=Path(args.docs),
            records=Path(args.records) if args.records else None,
            arms=tuple(a for a in args.arms.split(",") if a),
        )
        print(f"wrote {page}")
    if args.all:
        print(f"wrote {write_summary(Path(args.docs).parent)}")


if __name__ == "__main__":
    main()
