"""`analyze_entrance`: the "Locked at the Entrance" analyses of one RL run, written to a folder.

For the run's final policy (RL), the policy it started from (base) and an early
checkpoint (default: the base) on the run's Countdown task:

  1. coverage and entrance families: pass@1, pass@n, solution coverage and
     entrance-family entropy of base and RL (evaluate_task's task_metrics);
  2. likelihood shift: mean |Δ log p| per token offset from the first operator,
     RL samples scored by both (likelihood_shift.png), and its pre/post ratio;
  3. entrance-prefix intervention on RL (and base): completion after forcing each
     valid family's prefix, low- vs high-access families, coverage;
  4. late-layer interpolation: θ_RL with `layers` pulled toward the early
     checkpoint, pass@1 and coverage per α (interpolation.png).

Everything goes to <out>/entrance.json and <out>/entrance.md.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from flax import nnx

from rlvr_jax.analysis import checkpoints
from rlvr_jax.analysis.interpolate import interpolate_layers, layer_block
from rlvr_jax.analysis.intervention import entrance_intervention
from rlvr_jax.analysis.likelihood_shift import likelihood_shift, plot_shift
from rlvr_jax.rl.build import build_task
from rlvr_jax.train.evaluate import evaluate_task


@dataclasses.dataclass(frozen=True)
class EntranceOptions:
    """What the analyses sample.

    Attributes:
      num_problems: held-out problems (the first of `split`).
      n_samples: samples per problem (per forced family in the intervention).
      temperature, seed: sampling.
      max_new_tokens: decode budget; 0 = the run's rollout.max_new_tokens.
      window: likelihood-shift curve half-width (tokens).
      low_access: access below this makes a family low-access.
      layers: the interpolated block as "start:stop" (Python slice of the layers;
        "-2:" = the last two).
      alphas: the α sweep.
      split: problem split.
    """

    num_problems: int = 64
    n_samples: int = 16
    temperature: float = 1.0
    seed: int = 0
    max_new_tokens: int = 0
    window: int = 12
    low_access: float = 0.1
    layers: str = "-2:"
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    split: str = "test"


def parse_block(text: str, num_layers: int) -> list[int]:
    """Layer indices of "start:stop" (either may be empty; negatives from the end)."""
    start, sep, stop = text.partition(":")
    if not sep:
        raise ValueError(f"layers {text!r} must be 'start:stop' (e.g. '-2:' or '2:4')")
    return layer_block(num_layers, int(start or 0), int(stop) if stop else None)


def _eval(model, tok, task, o: EntranceOptions, max_new: int) -> dict[str, Any]:
    res = evaluate_task(
        model,
        tok,
        task,
        split=o.split,
        num_problems=o.num_problems,
        n_samples=o.n_samples,
        temperature=o.temperature,
        max_new_tokens=max_new,
        seed=o.seed,
    )
    keep = ("pass@1", f"pass@{o.n_samples}", "mean_reward")
    return {**{k: res[k] for k in keep}, **res["task_metrics"]}


def analyze_entrance(
    run_dir, early: str = "", out_dir=None, options: EntranceOptions = EntranceOptions()
) -> dict[str, Any]:
    """Runs the four analyses of the module docstring and writes them under `out_dir`.

    Args:
      run_dir: an RL run workdir with config.json and export/ (a Countdown task).
      early: the early checkpoint ("" = the run's initial policy, "step:N", or a
        model directory / run workdir).
      out_dir: default <run_dir>/entrance.
      options: EntranceOptions.
    Returns:
      The dict written to entrance.json.
    """
    o, start = options, time.perf_counter()
    c = checkpoints.run_config(run_dir)
    if c.task.name != "countdown":
        raise ValueError(
            f"{run_dir} trained on {c.task.name!r}; the entrance analyses need countdown"
        )
    task = build_task(c)
    max_new = o.max_new_tokens or c.rollout.max_new_tokens
    out = Path(out_dir or Path(run_dir) / "entrance")
    out.mkdir(parents=True, exist_ok=True)
    rl, tok = checkpoints.load_policy(run_dir)
    base, _ = checkpoints.initial_policy(run_dir)
    early_params, early_name = checkpoints.resolve_early(run_dir, early, rl)
    problems = task.problems(o.num_problems, o.split)
    sample = dict(
        n_samples=o.n_samples, max_new_tokens=max_new, temperature=o.temperature, seed=o.seed
    )
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "early": early_name,
        "options": dataclasses.asdict(o),
    }
    result["eval"] = {
        "base": _eval(base, tok, task, o, max_new),
        "rl": _eval(rl, tok, task, o, max_new),
    }
    shift = likelihood_shift(base, rl, tok, problems, window=o.window, **sample)
    plot_shift(shift, out / "likelihood_shift.png")
    result["likelihood_shift"] = shift
    result["intervention"] = {
        name: entrance_intervention(m, tok, task, problems, low_access=o.low_access, **sample)
        for name, m in (("rl", rl), ("base", base))
    }
    layers = parse_block(o.layers, rl.config.num_layers)
    graphdef, rl_params, rest = nnx.split(rl, nnx.Param, ...)
    sweep = []
    for alpha in o.alphas:
        model = nnx.merge(
            graphdef, interpolate_layers(rl_params, early_params, alpha, layers), rest
        )
        sweep.append({"alpha": alpha, **_eval(model, tok, task, o, max_new)})
    result["interpolation"] = {"layers": layers, "sweep": sweep}
    plot_sweep(sweep, out / "interpolation.png", o.n_samples)
    result["seconds"] = round(time.perf_counter() - start, 1)
    (out / "entrance.json").write_text(json.dumps(result, indent=2))
    (out / "entrance.md").write_text(markdown(result))
    return result


def plot_sweep(sweep: list[dict[str, Any]], path, n: int) -> None:
    """pass@1, pass@n and coverage against α, as a PNG."""
    import matplotlib  # lazy: heavy, and only needed for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    fig, ax = plt.subplots(figsize=(5, 3.2))
    alphas = [r["alpha"] for r in sweep]
    for key in ("pass@1", f"pass@{n}", "coverage"):
        ax.plot(alphas, [r[key] for r in sweep], marker="o", label=key)
    ax.set_xlabel("α (late layers toward the early checkpoint)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(r: dict[str, Any]) -> str:
    """The analyses as Markdown tables."""
    n = r["options"]["n_samples"]
    cols = ("pass@1", f"pass@{n}", "coverage", "entrance_entropy", "entrance_families")
    lines = [f"# Entrance analysis of {r['run_dir']}", "", "| policy | " + " | ".join(cols) + " |"]
    lines.append("|---" * (len(cols) + 1) + "|")
    for name, ev in r["eval"].items():
        lines.append(f"| {name} | " + " | ".join(f"{ev[k]:.3f}" for k in cols) + " |")
    s = r["likelihood_shift"]
    lines += [
        "",
        f"Likelihood shift (RL − base, RL samples): mean |Δ log p| {s['pre']:.4f} up to the "
        f"first operator vs {s['post']:.4f} after it: **{s['ratio']:.1f}x** "
        f"({s['num_problems']} problems, {s['num_responses']} responses).",
        "",
        "| policy | families | group | natural completion | forced completion |",
        "|---|---|---|---|---|",
    ]
    for name, iv in r["intervention"].items():
        for group, g in iv["summary"].items():
            nat, forced = g["natural_completion"], g["forced_completion"]
            fmt = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
            lines.append(f"| {name} | {g['count']} | {group} | {fmt(nat)} | {fmt(forced)} |")
    lines += ["", f"Interpolation toward {r['early']}, layers {r['interpolation']['layers']}:", ""]
    lines += ["| α | pass@1 | coverage | entrance entropy |", "|---|---|---|---|"]
    for row in r["interpolation"]["sweep"]:
        lines.append(
            f"| {row['alpha']:.2f} | {row['pass@1']:.3f} | {row['coverage']:.3f} "
            f"| {row['entrance_entropy']:.3f} |"
        )
    return "\n".join(lines) + "\n"
