"""`docs/reproductions.md`: one row per seed paper, built from the pages' JSON summaries.

A row is the paper's headline verdict when its page exists
(`docs/reproductions/<slug>.json`), its result naming the page's other claims'
verdicts, "not built yet (<open work>)" when the
method does not run end to end, "not run by the harness (<how it is run>)" for
a built pipeline or analysis (its result and link: what its own docs page
measured; with the seeds for one, that measurement's verdict by the same rule,
"<verdict> (measured outside the harness: <how>)"), "not run yet" when its
reproduction is declared but no page was written. The README carries the verdict
counts between two marker comments, rewritten by `update_readme`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rlvr_jax.repro import stats
from rlvr_jax.repro.catalogue import PAPERS
from rlvr_jax.repro.runs import EXPERIMENTS, REPO

NOT_BUILT = "not built yet"
NOT_RUN = "not run yet"
MANUAL = "not run by the harness"
MEASURED_OUTSIDE = "measured outside the harness"
README_BEGIN = "<!-- reproductions:begin (scripts/reproduce.py --all rewrites this block) -->"
README_END = "<!-- reproductions:end -->"


def declared(slug: str, experiments: Path = EXPERIMENTS) -> bool:
    return (Path(experiments) / slug / "repro.py").is_file()


def rows(docs: Path, experiments: Path = EXPERIMENTS) -> list[dict]:
    """One dict per seed paper: slug, claim, arms, result, verdict, link."""
    out = []
    for p in PAPERS:
        page = Path(docs) / "reproductions" / f"{p.slug}.json"
        row = {"slug": p.slug, "claim": p.claim, "arms": "–", "result": "–", "link": ""}
        if page.is_file():
            s = json.loads(page.read_text())
            head = s["claims"][0]
            row.update(
                claim=head["text"],
                arms=", ".join(s["arms"]),
                result=(
                    f"{head['metric']}: {head['arm']} {head['arm_value']} vs {head['baseline']} "
                    f"{head['baseline_value']}, Δ {head['delta']} "
                    f"(n = {head['n'][0]}/{head['n'][1]} seeds"
                    + (
                        f"; paired Δ {head['paired_delta']}, {head['paired_seeds']} seeds)"
                        if head.get("paired_delta")
                        else ")"
                    )
                    + "".join(
                        f"; {c['metric']} {c['arm']} vs {c['baseline']}: {c['verdict']}"
                        for c in s["claims"][1:]
                    )
                ),
                verdict=head["verdict"],
                link=f"[page](reproductions/{p.slug}.md)",
            )
        elif p.blocked:
            row["verdict"] = f"{NOT_BUILT} ({p.blocked})"
        elif p.manual:
            row["verdict"] = (
                f"{p.manual_verdict} ({MEASURED_OUTSIDE}: {p.manual})"
                if p.manual_verdict
                else f"{MANUAL} ({p.manual})"
            )
            row["result"] = p.manual_result or "–"
            row["link"] = f"[page]({p.manual_link})" if p.manual_link else ""
        elif declared(p.slug, experiments):
            row["verdict"] = NOT_RUN
        else:
            row["verdict"] = "no reproduction declared"
        out.append(row)
    return out


def counts(table: list[dict]) -> Counter:
    """Verdict -> number of papers ("not built yet", "not run by the harness": one kind each)."""

    def kind(verdict: str) -> str:
        kinds = (NOT_BUILT, MANUAL, *stats.VERDICTS)
        return next((k for k in kinds if verdict.startswith(k)), verdict)

    return Counter(kind(r["verdict"]) for r in table)


def counts_line(c: Counter) -> str:
    order = [
        stats.REPRODUCES,
        stats.NOT_RESOLVED,
        stats.OPPOSITE,
        stats.NO_VERDICT,
        stats.MIXED_WEIGHTS,
        stats.NOT_EXERCISED,
        NOT_RUN,
        MANUAL,
        NOT_BUILT,
    ]
    keys = order + sorted(k for k in c if k not in order)
    return "; ".join(f"{k}: {c[k]}" for k in keys if c[k])


def summary_text(docs: Path, experiments: Path = EXPERIMENTS) -> str:
    table = rows(docs, experiments)
    lines = [
        "# Reproductions of the seed papers' headline claims\n",
        "One row per seed paper. Each measured row links to its page: arms, seeds, the table "
        "of mean ± sd, the curves, the exact commands, runtime and machine, and what was shrunk "
        "relative to the paper. Rebuild a page with `python scripts/reproduce.py <slug>` and "
        "this table with `python scripts/reproduce.py --all`; finished runs are kept "
        "in `reproductions/records/`, so `--no-train` rebuilds a page on a fresh clone. A "
        "machine whose warm-start cache (`~/.cache/rlvr_jax/warmstart`) holds other weights "
        "restores only the records made on those; rebuild the recorded pages there with an "
        "empty cache (`HOME=$(mktemp -d) python scripts/reproduce.py <slug> --no-train "
        "--root $(mktemp -d)`). Where an arm adds a dense teacher or self-teacher term to "
        "the outcome advantage, that term's coefficient is chosen on the task's validation "
        "split, for the method and its baseline alike, by a sweep its page records "
        "(`Reproduction.sweeps`); the test split is never used to choose.\n",
        f"Verdict rule: {stats.RULE}\n",
        f"Counts: {counts_line(counts(table))}.\n",
        "| slug | paper's claim | our arms | our result | verdict | link |",
        "|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['slug']} | {r['claim']} | {r['arms']} | {r['result']} | {r['verdict']} | "
            f"{r['link']} |"
        )
    others = sorted(
        p.stem
        for p in (Path(docs) / "reproductions").glob("*.json")
        if p.stem not in {x.slug for x in PAPERS}
    )
    if others:
        lines += [
            "",
            "Other pages (baselines, select-stage and rollout-stage references, not seed papers): "
            + ", ".join(f"[{s}](reproductions/{s}.md)" for s in others)
            + ".",
        ]
    return "\n".join(lines) + "\n"


def update_readme(readme: Path, c: Counter) -> bool:
    """Rewrites the counts block of the README; False if it has no marker block."""
    text = Path(readme).read_text()
    if README_BEGIN not in text or README_END not in text:
        return False
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    body = (
        f"\nVerdicts over the 30 seed papers ({counts_line(c)}): "
        "[docs/reproductions.md](docs/reproductions.md).\n"
    )
    Path(readme).write_text(head + README_BEGIN + body + README_END + tail)
    return True


def write_summary(docs: Path = REPO / "docs") -> Path:
    """Writes <docs>/reproductions.md and the counts block of the README next to <docs>.

    Returns:
      The table's path.
    """
    path = Path(docs) / "reproductions.md"
    path.write_text(summary_text(docs))
    update_readme(Path(docs).parent / "README.md", counts(rows(docs)))
    return path
