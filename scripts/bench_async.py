"""Asynchronous vs synchronous RL steps: wall seconds per step, CPU seconds and idle times.

Usage (both cores, nothing else running):
  taskset -c 0,1 python scripts/bench_async.py                       # Countdown GRPO, 20 steps
  taskset -c 0,1 python scripts/bench_async.py --steps 12 --set rollout.max_new_tokens=160 \
      --set rollout.temperature=1.4                                  # a long-tailed workload
  python scripts/bench_async.py --config experiments/baselines/grpo.py:pulse --steps 3 \
      --arms sync,k1                                                 # a smoke test
  taskset -c 0,1 python scripts/bench_async.py --arms sync,k1-process,k2-process
                                       # the worker process on core 1, the learner on 0

Each arm is one run of the config (`python -m rlvr_jax.main`, a fresh process and
workdir, evaluation only at the end) on the same cores, one after the other:

  sync        the synchronous step, π_old = μ (the default config)
  sync+tis    the synchronous step, π_old recomputed, token TIS (what k1/k2 add)
  k1, k2      async_rl.max_staleness = 1, 2, π_old recomputed, token TIS (cap 2)
  k1-partial  k1 with partial rollouts ("continue", segments of 16 tokens)
  k1-device, k2-device  k1, k2 with the worker on local device 1, the learner on
              device 0 (needs two devices: on a CPU, XLA_FLAGS=
              "--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false"
              gives one core-sized device each)
  k1-process, k2-process  k1, k2 with the worker in its own OS process
              (async_rl.worker=process) pinned to the second of this script's
              cores (async_rl.worker_cpus), the learner to the first (taskset -c)

Per arm: the median step wall time over the steps after the first `--skip`
(compilation), the run's total wall and CPU seconds (user + system of the child),
the learner's idle fraction (time waiting for rollouts / step time) and the
rollout worker's idle fraction (time waiting for a version / its waiting plus
sampling time; a synchronous step's rollout idles during the update, not counted), the
median rollout and update seconds, the final held-out pass@1, and the speed-up of
each arm's median step over `sync`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORRECTION = ["loss.recompute_old_logps=True", "loss.rollout_correction=tis_token"]
ARMS = {
    "sync": [],
    "sync+tis": CORRECTION,
    "k1": ["async_rl.max_staleness=1", *CORRECTION],
    "k2": ["async_rl.max_staleness=2", *CORRECTION],
    "k1-partial": ["async_rl.max_staleness=1", "async_rl.partial_rollouts=continue", *CORRECTION],
    # The worker on its own device (run with XLA_FLAGS=--xla_force_host_platform_device_count=2).
    "k1-device": ["async_rl.max_staleness=1", "async_rl.rollout_device=1", *CORRECTION],
    "k2-device": ["async_rl.max_staleness=2", "async_rl.rollout_device=1", *CORRECTION],
    # The worker in its own process on one core, the learner on another (`placement`).
    "k1-process": ["async_rl.max_staleness=1", "async_rl.worker=process", *CORRECTION],
    "k2-process": ["async_rl.max_staleness=2", "async_rl.worker=process", *CORRECTION],
}


def placement(name: str, cores: list[int]) -> tuple[list[str], list[str]]:
    """(command prefix, overrides) pinning a `-process` arm: the learner to the first of
    `cores`, the worker to the second (the same one when there is only one)."""
    if not name.endswith("-process"):
        return [], []
    learner, worker = cores[0], cores[min(1, len(cores) - 1)]
    return ["taskset", "-c", str(learner)], [f"async_rl.worker_cpus={worker}"]


def run_arm(config: str, steps: int, overrides: list[str], workdir: Path,
            prefix: list[str] = ()) -> tuple[float, float]:  # fmt: skip
    """Runs one arm to the end; (wall seconds, CPU seconds of its processes)."""
    cmd = [*prefix, sys.executable, "-m", "rlvr_jax.main", f"--config={config}",
           f"--workdir={workdir}", f"--config.train.steps={steps}", "--config.eval.every=0",
           "--config.eval.at_start=False", f"--config.checkpoint.every={steps}"]  # fmt: skip
    cmd += [f"--config.{o}" for o in overrides]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit(f"arm failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def summarise(workdir: Path, skip: int) -> dict[str, float]:
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"][skip:]
    final = [r for r in rows if r["split"] == "eval"][-1]
    span = sum(r["step_seconds"] for r in train)
    waited = sum(r.get("async/rollout_wait_seconds", 0.0) for r in train)
    med = lambda key: statistics.median(r.get(key, 0.0) for r in train)  # noqa: E731
    return {
        "step_s": med("step_seconds"),
        "rollout_s": med("rollout_seconds"),
        "update_s": med("update_seconds"),
        "learner_idle": sum(r.get("async/learner_wait_seconds", 0.0) for r in train) / span,
        "rollout_idle": waited / max(waited + sum(r["rollout_seconds"] for r in train), 1e-9),
        "pass@1": final["pass@1"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="experiments/baselines/grpo.py")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=2, help="first steps left out of the medians")
    ap.add_argument("--arms", default="sync,sync+tis,k1,k2")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="config override for every arm (repeatable)")  # fmt: skip
    ap.add_argument("--workdir", help="where the runs go (default: a temporary directory)")
    args = ap.parse_args()
    names = args.arms.split(",")
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        sys.exit(f"--arms: unknown {unknown}; choose from {list(ARMS)}")
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench_async_"))
    affinity = sorted(os.sched_getaffinity(0))
    print(f"config {args.config}, {args.steps} steps, overrides {args.set or 'none'}, "
          f"cores {affinity}, medians over steps {args.skip + 1}..{args.steps}")  # fmt: skip
    results = {}
    for name in names:
        workdir = base / name.replace("+", "_")
        prefix, pinned = placement(name, affinity)
        if prefix:
            print(f"  {name}: learner on core {prefix[-1]}, worker on "
                  f"{pinned[0].split('=')[1]}", flush=True)  # fmt: skip
        overrides = args.set + ARMS[name] + pinned
        wall, cpu = run_arm(args.config, args.steps, overrides, workdir, prefix)
        results[name] = dict(summarise(workdir, args.skip), wall_s=wall, cpu_s=cpu)
        print(f"  {name}: done in {wall:.0f} s", flush=True)
    ref = results.get("sync", {}).get("step_s")
    print("\n| arm | step s (median) | speed-up | rollout s | update s | learner idle | "
          "rollout idle | run wall s | run CPU s | pass@1 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        speed = f"{ref / r['step_s']:.2f}x" if ref else "–"
        print(f"| {name} | {r['step_s']:.2f} | {speed} | {r['rollout_s']:.2f} | "
              f"{r['update_s']:.2f} | {r['learner_idle']:.0%} | {r['rollout_idle']:.0%} | "
              f"{r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['pass@1']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
