"""The code sandbox's cost: overhead per call and pool throughput.

Usage:
  nice python scripts/bench_sandbox.py                  # 200 calls, workers 1 and 2
  python scripts/bench_sandbox.py --calls 50 --workers 1,2,4

Overhead: `--calls` trivial programs (`print(1)` on one stdin/stdout test) run
one at a time through a one-worker pool; each run's wall seconds as the sandbox
measures it (bubblewrap start, namespaces, the interpreter's start, teardown),
p50/p99 over the calls, and the same for the bare interpreter outside any
sandbox, so the difference is what isolation adds. Throughput: the same programs
as one batch through `SandboxPool(workers=w)`, programs per second of wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

from rlvr_jax.sandbox import CodeJob, SandboxPool, TestCase
from rlvr_jax.sandbox.jail import default_python

PROGRAM = "print(int(input()) + 1)"


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def bare_seconds(calls: int) -> list[float]:
    """Wall seconds of the interpreter running PROGRAM with no sandbox."""
    out = []
    for i in range(calls):
        start = time.monotonic()
        subprocess.run([default_python(), "-I", "-B", "-c", PROGRAM], input=f"{i}\n",
                       capture_output=True, text=True, check=True)  # fmt: skip
        out.append(time.monotonic() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workers", default="1,2", help="comma-separated pool sizes")
    args = parser.parse_args()
    jobs = [CodeJob(PROGRAM, (TestCase(f"{i}\n", str(i + 1)),)) for i in range(args.calls)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    one = SandboxPool(workers=1)
    per_call = []
    for job in jobs:
        [result] = one.run([job])
        assert result.all_passed, result.tests[0]
        per_call.append(result.tests[0].seconds)
    bare = bare_seconds(args.calls)
    for name, xs in (("sandboxed", per_call), ("bare python", bare)):
        print(f"{name:>12}: p50 {1e3 * statistics.median(xs):7.1f} ms   "
              f"p99 {1e3 * percentile(xs, 99):7.1f} ms   over {len(xs)} calls")  # fmt: skip
    extra = statistics.median(per_call) - statistics.median(bare)
    print(f"{'overhead':>12}: p50 {1e3 * extra:7.1f} ms")

    for w in (int(x) for x in args.workers.split(",")):
        pool = SandboxPool(workers=w)
        start = time.monotonic()
        results = pool.run(jobs)
        wall = time.monotonic() - start
        assert all(r.all_passed for r in results)
        print(f"pool workers={w}: {len(jobs) / wall:6.1f} programs/s ({len(jobs)} in {wall:.2f} s)")


if __name__ == "__main__":
    main()
