"""Side-by-side audit of the schedulers on the simulated population (scripts/bench_schedulers.py).

Per method and seed, over `steps` RL steps: effective groups per 1,000
rollouts, generated tokens per effective group, rollouts to fill a batch of B
effective groups (B · rollouts / effective groups), tokens relative to running
every started rollout to completion (full groups), and for PAIR the relative
bias of the gradient estimator against the complete-pair target (Monte Carlo
over the continuation design on frozen prefixes, with its standard error),
next to the unweighted estimator (RLOO over whatever completed).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rlvr_jax import scheduling as S
from rlvr_jax.scheduling import sim

METHODS = (
    ("uniform", {}),
    ("dynamic_sampling", {}),
    ("difficulty", {}),
    ("difficulty+graph", {"difficulty": "graph"}),
    ("sara", {}),
    ("sara+graph", {"difficulty": "graph"}),
    ("vigor", {}),
    ("pair", {}),
    ("leeps", {}),
)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    seeds: int = 5
    steps: int = 30
    num_prompts: int = 1000
    groups: int = 32
    group_size: int = 8
    max_rounds: int = 12
    drift: float = 0.0
    audit_draws: int = 4000


def run_method(name: str, kwargs: dict, seed: int, cfg: BenchConfig):
    """Runs one scheduler for cfg.steps steps; returns (totals dict, scheduler, state, sampler)."""
    pop = sim.make_population(seed, num_prompts=cfg.num_prompts)
    sampler = sim.SimSampler(pop, seed + 1, group_size=cfg.group_size, drift=cfg.drift)
    budget = S.Budget(cfg.groups, cfg.group_size, 4 * cfg.groups * cfg.group_size, cfg.max_rounds)
    sched = S.make_scheduler(name.split("+")[0], **kwargs)
    state = sched.init(pop.pool(), budget)
    tot = {"rollouts": 0.0, "tokens": 0.0, "effective": 0.0, "full_tokens": 0.0}
    for step in range(cfg.steps):
        state, sel = S.run_step(sched, state, jax.random.key(seed * 10_000 + step), budget, sampler)
        tot["rollouts"] += sel.stats["rollouts"]
        tot["tokens"] += sel.stats["tokens"]
        tot["effective"] += sel.stats["effective_groups"]
        tot["full_tokens"] += sampler.tokens_if_full
        sampler.end_step()
    return tot, sched, state, sampler, budget


def pair_audit(sched, state, sampler, budget, seed: int, draws: int) -> dict[str, float]:
    """Relative bias (and MC standard error) of PAIR's estimator vs the complete-pair target."""
    key = jax.random.key(seed)
    plan = sched.propose(state, key, budget)
    state = sched.observe(state, plan, sampler(plan))
    cont = sched.propose(state, jax.random.fold_in(key, 1), budget)
    pi = cont.info["incl"].reshape(budget.groups, budget.group_size).astype(np.float64)
    hidden = [sampler.hidden[i] for i in range(budget.groups * budget.group_size)]
    r = np.array([h[0] for h in hidden], np.float64).reshape(pi.shape)
    rng = np.random.default_rng(seed)
    g = rng.normal(size=pi.shape)
    n = budget.group_size
    target = np.sum((r * n - r.sum(1, keepdims=True)) / (n - 1) * g)
    inc = rng.random((draws, *pi.shape)) < pi
    w = inc / pi
    s0, s1 = w.sum(-1, keepdims=True), (w * r).sum(-1, keepdims=True)
    est = np.sum(w * (r * s0 - s1) / (n - 1) * g, (1, 2))
    k = inc.sum(-1, keepdims=True)
    naive_adv = inc * (r * k - (inc * r).sum(-1, keepdims=True)) / np.maximum(k - 1, 1)
    naive = np.sum(naive_adv * g, (1, 2))
    scale = abs(target)
    return {
        "bias_pair": (est.mean() - target) / scale,
        "se_pair": est.std() / np.sqrt(draws) / scale,
        "bias_naive": (naive.mean() - target) / scale,
        "se_naive": naive.std() / np.sqrt(draws) / scale,
    }


def run(cfg: BenchConfig, log=print) -> dict[str, dict[str, np.ndarray]]:
    """All methods × seeds; returns per-method arrays of per-seed metrics."""
    out = {}
    for label, kwargs in METHODS:
        rows = []
        for seed in range(cfg.seeds):
            tot, sched, state, sampler, budget = run_method(label, kwargs, seed, cfg)
            e = max(tot["effective"], 1.0)
            row = {
                "eff_per_1k": 1000 * tot["effective"] / tot["rollouts"],
                "tokens_per_eff": tot["tokens"] / e,
                "rollouts_to_fill": cfg.groups * tot["rollouts"] / e,
                "tokens_vs_full": tot["tokens"] / tot["full_tokens"],
            }
            if label == "pair":
                row.update(pair_audit(sched, state, sampler, budget, seed, cfg.audit_draws))
            rows.append(row)
        out[label] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
        log(f"done {label}")
    return out


def table(results, cfg: BenchConfig) -> str:
    """A markdown table of mean ± sd over seeds, plus the comparisons the papers report."""

    def ms(x, fmt="{:.1f}"):
        sd = np.std(x, ddof=1) if len(x) > 1 else 0.0
        return f"{fmt.format(np.mean(x))} ± {fmt.replace('+', '').format(sd)}"

    lines = [
        f"seeds={cfg.seeds} steps={cfg.steps} N={cfg.num_prompts} B={cfg.groups} "
        f"G={cfg.group_size} drift={cfg.drift}",
        "",
        "| method | eff. groups / 1k rollouts | tokens / eff. group | rollouts to fill B "
        "| tokens / full-group tokens |",
        "|---|---|---|---|---|",
    ]
    for label, m in results.items():
        lines.append(
            f"| {label} | {ms(m['eff_per_1k'])} | {ms(m['tokens_per_eff'], '{:.0f}')} "
            f"| {ms(m['rollouts_to_fill'], '{:.0f}')} | {ms(m['tokens_vs_full'], '{:.2f}')} |"
        )
    fill = {k: v["rollouts_to_fill"] for k, v in results.items()}
    toks = {k: v["tokens_per_eff"] for k, v in results.items()}
    lines += ["", "Comparisons (per seed ratio, mean ± sd):"]
    for a, b, what in (
        ("sara", "dynamic_sampling", "rollouts to fill B"),
        ("sara+graph", "dynamic_sampling", "rollouts to fill B"),
        ("vigor", "uniform", "rollouts to fill B"),
    ):
        lines.append(f"- {a} vs {b}, {what}: {ms(100 * (fill[a] / fill[b] - 1), '{:+.1f}')} %")
    lines.append(
        "- pair vs uniform, tokens per effective group: "
        f"{ms(100 * (toks['pair'] / toks['uniform'] - 1), '{:+.1f}')} %"
    )
    p = results["pair"]
    lines.append(
        f"- pair tokens vs running its candidates to completion: "
        f"{ms(100 * (p['tokens_vs_full'] - 1), '{:+.1f}')} %"
    )
    lines.append(
        "- PAIR |relative bias| vs the complete-pair target (per seed: one frozen step, "
        f"{cfg.audit_draws} design draws): weighted {ms(100 * np.abs(p['bias_pair']), '{:.2f}')}"
        f" % (MC s.e. {100 * np.mean(p['se_pair']):.2f} %), unweighted "
        f"{ms(100 * np.abs(p['bias_naive']), '{:.2f}')} % "
        f"(MC s.e. {100 * np.mean(p['se_naive']):.2f} %)"
    )
    return "\n".join(lines)
