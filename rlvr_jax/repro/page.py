"""The page of one reproduction: `docs/reproductions/<slug>.md` (+ `.png` curves, `.json` summary).

`page_text` is a pure function of the declaration, the results and the run
facts, so tests check it on constructed numbers; `write_page` adds the plot and
the machine-readable summary that `rlvr_jax.repro.summary` tabulates.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

from rlvr_jax.repro import pipelines
from rlvr_jax.repro import runs as runs_lib
from rlvr_jax.repro import sweeps as sweeps_lib
from rlvr_jax.repro.metrics import PASS_1_BEFORE
from rlvr_jax.repro.plot import plot_arms
from rlvr_jax.repro.results import (
    ClaimResult,
    RunResult,
    arm_summaries,
    claim_results,
)
from rlvr_jax.repro.spec import Metric, Reproduction
from rlvr_jax.repro.stats import RULE, Difference, Summary

DOCS = runs_lib.REPO / "docs" / "reproductions"


def _when(c: dict) -> str:
    """When a run of config `c` evaluates, in words."""
    start = "before RL, " if c["eval"].get("at_start", True) else ""
    every = c["eval"]["every"]
    return f"{start}every {every} steps and at the end" if every else f"{start}at the end"


def fmt_value(x: float, metric: Metric) -> str:
    return "–" if not math.isfinite(x) else metric.fmt.format(x * metric.scale)


def fmt_summary(s: Summary, metric: Metric) -> str:
    """ "mean ± sd (n)"; "mean (n=1)" with one value; "–" with none."""
    if s.n == 0:
        return "–"
    if s.n == 1:
        return f"{fmt_value(s.mean, metric)} (n=1)"
    return f"{fmt_value(s.mean, metric)} ± {fmt_value(s.sd, metric)}"


def fmt_diff(d: Difference, metric: Metric) -> str:
    """ "+Δ ± s.e." in the metric's display units (sign always shown)."""
    if not math.isfinite(d.delta):
        return "–"
    delta = metric.fmt.format(d.delta * metric.scale)
    delta = delta if delta.startswith("-") else "+" + delta
    if not math.isfinite(d.se):
        return f"{delta} (s.e. –)"
    return f"{delta} ± {fmt_value(d.se, metric)}"


def fmt_paired(d: Difference | None, metric) -> str:
    return "–" if d is None else f"{fmt_diff(d, metric)} ({d.pairs})"


def results_table(repro: Reproduction, results: list[RunResult]) -> str:
    """Arms × metrics: mean ± sd over finished seeds, and Δ to the baseline ± s.e."""
    summaries = arm_summaries(repro, results)
    head = ["arm", "role", "runs done"]
    for m in repro.metrics:
        head += [m.name, f"Δ {m.name}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in repro.arms:
        mine = [r for r in results if r.run.arm.name == arm.name]
        done = sum(r.done for r in mine)
        crashed = sum(r.run.status == runs_lib.CRASHED for r in mine)
        runs_cell = f"{done}/{len(mine)}" + (f" ({crashed} crashed)" if crashed else "")
        cells = [arm.name, arm.role, runs_cell]
        for m in repro.metrics:
            s = summaries[arm.name][m.name]
            cells.append(fmt_summary(s, m))
            ref = repro.reference(arm)
            if arm.name == ref:
                cells.append("(baseline)")
            else:
                cells.append(fmt_diff(Difference.of(s, summaries[ref][m.name]), m))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def claims_table(repro: Reproduction, claims: list[ClaimResult]) -> str:
    head = (
        "| claim | metric | comparison | paper | ours: Δ ± s.e. (relative) "
        "| paired Δ ± s.e. (seeds) | verdict |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for c in claims:
        m = repro.metric(c.claim.metric)
        rel = "" if not math.isfinite(c.diff.relative) else f" ({100 * c.diff.relative:+.0f}%)"
        a, b = c.claim.arm, c.claim.baseline
        bound = (
            f"{100 * c.claim.margin:.0f}% of {b}"
            if c.claim.relative
            else fmt_value(c.claim.margin, m)
        )
        comparison = {
            "higher": f"{a} > {b}",
            "lower": f"{a} < {b}",
            "within": f"{a} ≈ {b} (\\|Δ\\| ≤ {bound})",  # escaped: inside a table cell
            "at_most": f"{a} − {b} ≤ {bound}",
        }[c.claim.direction]
        lines.append(
            f"| {c.claim.text} | {m.name} | {comparison} | "
            f"{c.claim.paper or '–'} | {fmt_diff(c.diff, m)}{rel} | {fmt_paired(c.paired, m)} "
            f"| **{c.verdict}** |"
        )
    return "\n".join(lines) + "\n"


def runs_table(repro: Reproduction, results: list[RunResult]) -> str:
    """Every run the harness started or planned, crashed ones included."""
    head = ["arm", "seed", "status"] + [m.name for m in repro.metrics]
    head += ["wall s", "CPU s", "commit", "run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        m = r.run.manifest
        attempts = m.get("attempts", [])
        commits = sorted({a.get("commit", "?") for a in attempts}) or ["–"]
        cells = [r.run.arm.name, str(r.run.seed), r.run.status]
        cells += [fmt_value(r.values.get(x.name, math.nan), x) for x in repro.metrics]
        cells += [
            f"{runs_lib.wall_seconds(m):.0f}" if attempts else "–",
            f"{runs_lib.cpu_seconds(m):.0f}" if attempts else "–",
            ", ".join(commits),
            f"`{r.run.key}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    crashed = [r for r in results if r.run.status == runs_lib.CRASHED]
    for r in crashed:
        tail = r.run.manifest.get("attempts", [{}])[-1].get("log_tail", "")
        lines.append(f"\n{r.run.arm.name} seed {r.run.seed} crashed; end of its log:\n")
        lines.append("```\n" + tail + "\n```")
    return "\n".join(lines) + "\n"


def _run_line(c: dict) -> str:
    """What a run of config `c` trains and how it is evaluated, one line."""
    model = c["model"]
    where = (
        f"warm-start `{model['domain']}` {model['role']}"
        if model["source"] == "warm_start"
        else f"{model['source']} model"
    )
    e = c["eval"]
    held_out = (
        f"held-out evaluation on the first {e['num_problems']} `{e['split']}` problems, "
        f"{e['n_samples']} samples each at temperature {e['temperature']} (unbiased pass@k)"
    )
    if pipelines.is_pipeline(c):
        stages = ", ".join(
            f"{n} ({c['stages'][n]['kind']}, ≤ {c['stages'][n]['run']['train']['steps']} steps)"
            if "steps" in c["stages"][n]["run"].get("train", {})
            else f"{n} ({c['stages'][n]['kind']})"
            for n in pipelines.stage_names(c)
        )
        return (
            f"- A pipeline from the {where}: stages {stages}; {held_out}, of the base and of "
            "each stage's export (an arm's value is its stage's evaluation)."
        )
    return (
        f"- Task `{c['task']['name']}`, policy: {where}; {c['train']['steps']} RL steps of "
        f"{c['data']['prompts_per_step']} prompts × G = {c['data']['group_size']} rollouts "
        f"(≤ {c['rollout']['max_new_tokens']} new tokens); {held_out}, {_when(c)}."
    )


def _start(c: dict) -> tuple[str, str]:
    """The task and the policy a run of config `c` starts from (its before-RL group)."""
    model = c.get("model", {})
    return c.get("task", {}).get("name", "?"), f"{model.get('domain', '?')} {model.get('role', '')}"


def _before_rl(results: list[RunResult]) -> list[str]:
    """Held-out pass@1 before RL, one figure per (task, starting policy) of the finished runs."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        if r.done:
            groups.setdefault(_start(r.run.config), []).append(r)
    head = "- Before RL (the step-0 evaluation of the finished runs): held-out pass@1 "
    if len(groups) == 1:
        (rs,) = groups.values()
        return [head + f"{fmt_summary(Summary.of([r.before for r in rs]), PASS_1_BEFORE)} %."]
    parts = []
    for (task, start), rs in groups.items():
        arms = ", ".join(dict.fromkeys(r.run.arm.name for r in rs))
        before = fmt_summary(Summary.of([r.before for r in rs]), PASS_1_BEFORE)
        parts.append(f"{before} % on `{task}` from the {start.strip()} (arms {arms})")
    return [head + "; ".join(parts) + "."] if parts else []


def _setup(repro: Reproduction, results: list[RunResult]) -> str:
    c = results[0].run.config if results else {}
    lines = []
    if c:
        lines.append(_run_line(c))
    lines += _before_rl(results)
    lines.append("- Arms (config file under `experiments/`, overrides on top of the common ones):")
    for a in repro.arms:
        over = ", ".join(f"`{k}={v}`" for k, v in a.overrides.items()) or "none"
        note = f" — {a.note}" if a.note else ""
        if a.baseline and a.baseline != a.name:
            note += f" (its Δ columns: against {a.baseline})"
        at = f" (stage `{a.stage}`)" if a.stage else ""
        lines.append(f"  - **{a.name}** ({a.role}): `{a.config}`{at}; overrides {over}{note}")
    common = ", ".join(f"`{k}={v}`" for k, v in repro.common.items()) or "none"
    lines.append(f"- Common overrides (every arm): {common}")
    lines.append(
        "- Metrics: " + "; ".join(f"**{m.name}**: {m.doc or m.key}" for m in repro.metrics)
    )
    if repro.shrunk:
        lines.append(f"- Shrunk relative to the paper: {repro.shrunk}")
    if repro.tuning:
        lines.append(f"- Hyperparameters: {repro.tuning}")
    if repro.notes:
        lines.append(f"- Notes: {repro.notes}")
    return "\n".join(lines) + "\n"


def page_facts(results: list[RunResult]) -> dict[str, Any]:
    """Runtime, dates, machines and commits over the runs' attempts."""
    seen, attempts = set(), []
    for r in results:
        if r.run.key not in seen:
            seen.add(r.run.key)
            attempts += r.run.manifest.get("attempts", [])
    starts = sorted(a["start"] for a in attempts if "start" in a)
    weights: dict[str, set[str]] = {}
    for a in attempts:
        for name, digest in a.get("warm_starts", {}).items():
            weights.setdefault(name, set()).add(digest)
    return {
        "warm_starts": {name: sorted(d) for name, d in sorted(weights.items())},
        "wall_s": sum(a.get("wall_s", 0.0) for a in attempts),
        "cpu_s": sum(a.get("cpu_s", 0.0) for a in attempts),
        "dates": f"{starts[0][:10]} .. {starts[-1][:10]}" if starts else "–",
        "machines": sorted({a.get("machine", "?") for a in attempts}),
        "how": sorted({a.get("how") or "?" for a in attempts}),
        "commits": sorted({a.get("commit", "?") for a in attempts}),
        "distinct_runs": len(seen),
    }


def warm_start_line(weights: dict[str, list[str]]) -> str:
    """The page's line on the warm-start weights the runs started from."""
    if not weights:
        return "- Warm starts: not recorded (runs before the harness recorded them)."
    parts = []
    for name, digests in weights.items():
        if len(digests) > 1:
            parts.append(
                f"`{name}` **{', '.join(digests)}: retrained between runs, which therefore "
                "started from different models**"
            )
        else:
            parts.append(f"`{name}` {digests[0]}")
    head = "- Warm starts (sha256 of the weights, as recorded per attempt): "
    return head + "; ".join(parts) + "."


def page_text(
    repro: Reproduction,
    results: list[RunResult],
    *,
    seeds: list[int],
    root: str,
    png: str = "",
    choices: dict | None = None,
) -> str:
    """The markdown page of a reproduction."""
    claims = claim_results(repro, results)
    facts = page_facts(results)
    seeds_arg = ",".join(map(str, seeds))
    out = [f"# {repro.slug}: {repro.paper}\n"]
    if claims:
        head = claims[0]
        out += [
            f"Miniature reproduction. Headline claim: {head.claim.text} — **{head.verdict}** "
            f"({head.claim.arm} vs {head.claim.baseline} on {head.claim.metric}, "
            f"{len(seeds)} seed{'s' * (len(seeds) != 1)}).\n",
            "## Claims and verdicts\n",
            claims_table(repro, claims),
            f"Rule: {RULE}\n",
        ]
    else:
        out += [
            f"Reference table (no paper's claim): every arm against {repro.baseline}, "
            f"{len(seeds)} seed{'s' * (len(seeds) != 1)}.\n"
        ]
    out += [
        "## Setup\n",
        _setup(repro, results),
    ]
    if repro.sweeps:
        out.append(sweeps_lib.table(repro, choices or {}))
    out += [
        "## Results (mean ± sd over seeds; Δ to the baseline ± its s.e.)\n",
        results_table(repro, results),
    ]
    if png:
        out += [f"![curves of every arm, seed means with the seeds faint]({png})\n"]
    out += [
        "## Runs\n",
        "Every run the harness started (a run shared with other pages is listed on each). "
        "Wall and CPU seconds are the training command's, summed over its attempts.\n",
        runs_table(repro, results),
        "## Commands\n",
        "```bash\n"
        f"python scripts/reproduce.py {repro.slug} --seeds {seeds_arg} --root {root}\n"
        "```\n",
        "which runs (from the repository root), skipping finished runs and resuming "
        "unfinished ones:\n",
        "```bash\n" + "\n".join(" ".join(r.run.command) for r in results) + "\n```\n",
        "## Runtime and machine\n",
        f"- {facts['distinct_runs']} distinct runs; {facts['wall_s'] / 60:.1f} wall-minutes, "
        f"{facts['cpu_s'] / 60:.1f} CPU-minutes in all (training commands, all attempts).",
        f"- Dates: {facts['dates']}; code: {', '.join(facts['commits'])}.",
        f"- Machine: {'; '.join(facts['machines']) or '–'}; runs {', '.join(facts['how'])}.",
        warm_start_line(facts["warm_starts"]),
        f"- Page written {datetime.date.today().isoformat()}.\n",
    ]
    return "\n".join(out)


def page_summary(
    repro: Reproduction, results: list[RunResult], seeds: list[int], choices: dict | None = None
) -> dict:
    """The machine-readable summary that `docs/reproductions.md` is built from."""
    claims = claim_results(repro, results)
    facts = page_facts(results)
    out_claims = []
    for c in claims:
        m = repro.metric(c.claim.metric)
        out_claims.append(
            {
                "text": c.claim.text,
                "metric": c.claim.metric,
                "arm": c.claim.arm,
                "baseline": c.claim.baseline,
                "direction": c.claim.direction,
                "paper": c.claim.paper,
                "delta": fmt_diff(c.diff, m),
                "paired_delta": "" if c.paired is None else fmt_diff(c.paired, m),
                "paired_seeds": 0 if c.paired is None else c.paired.pairs,
                "arm_value": fmt_summary(c.arm, m),
                "baseline_value": fmt_summary(c.baseline, m),
                "n": [c.arm.n, c.baseline.n],
                "verdict": c.verdict,
            }
        )
    out = {
        "slug": repro.slug,
        "paper": repro.paper,
        "arms": [a.name for a in repro.arms],
        "seeds": seeds,
        "claims": out_claims,
        "runs": len(results),
        "crashed": sum(r.run.status == runs_lib.CRASHED for r in results),
        "cpu_minutes": round(facts["cpu_s"] / 60, 1),
        "commits": facts["commits"],
        "date": datetime.date.today().isoformat(),
    }
    if choices:
        out["sweeps"] = sweeps_lib.summary(choices)
    return out


def write_page(
    repro: Reproduction,
    results: list[RunResult],
    *,
    seeds: list[int],
    root: str,
    docs=DOCS,
    plot: bool = True,
    choices: dict | None = None,
) -> Path:
    """Writes `<docs>/<slug>.md`, `.png` (unless not `plot`) and `.json`; returns the .md path."""
    docs = Path(docs)
    docs.mkdir(parents=True, exist_ok=True)
    png = docs / f"{repro.slug}.png"
    if plot:
        plot_arms(repro, results, png)
    md = docs / f"{repro.slug}.md"
    png_name = png.name if plot else ""
    md.write_text(page_text(repro, results, seeds=seeds, root=root, png=png_name, choices=choices))
    summary = page_summary(repro, results, seeds, choices)
    (docs / f"{repro.slug}.json").write_text(json.dumps(summary, indent=2) + "\n")
    return md
