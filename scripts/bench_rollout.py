"""RLVR rollout workload: the static sampler vs the paged engine vs transformers (vs tunix).

Usage:
  taskset -c 1 python scripts/bench_rollout.py --size 3m
  taskset -c 1 python scripts/bench_rollout.py --size 30m --prompts 16
  taskset -c 1 python scripts/bench_rollout.py --size 3m --lengths uniform
  ... --tunix-path DIR   (adds google-tunix's vanilla sampler: see `tunix_runner`)

Workload (`Workload`): P prompts of uniform random length in [prompt_min,
prompt_max] tokens, G = 8 samples each; every row's response length is drawn
from a lognormal with median m and sigma = ln(8) / 2.326, so p99 = 8m, the
shape of long chain-of-thought RL rollouts (most responses short, a tail of
ones many times longer that a static batch waits for), capped at the p99 (1%
of rows end at the cap). `--lengths uniform` gives every row the lognormal's
mean length instead (batching cannot help: no engine may lose there).

Every engine does the same work: row r generates exactly L_r tokens.
  paged        `Engine.generate` with per-row `max_new_tokens = L_r` (rows end, free
               their slot and pages, and the next waiting row is admitted).
  static       one `Sampler` call with max_new_tokens = max L_r and no stop tokens.
               Its decode loop runs every row until the longest ends whether or not
               rows stop earlier, so this is exactly the static path's cost with
               per-row stops; its tokens past L_r are the waste it pays.
  transformers `generate` on the same weights (HF format), left-padded prompts,
               max_new_tokens = min_new_tokens = max L_r (the same static cost).
  tunix        google-tunix's `Sampler` on the same weights, max L_r steps.
Reported per engine: useful tokens/s (sum of L_r over wall), wall and CPU
seconds (medians over repeats; engines alternate within each repeat), and the
wasted token-steps: the token positions an engine computed (static: B x (P_pad
+ max L); paged: S x decode steps + the prefill programs' lanes x chunk) minus the
ones any engine must (each prompt once, each response token). The static
path's waste is rows kept past their end, prompt padding and the G - 1
repeated prefills of each prompt; the engine's is idle decode slots and
padded prefill lanes. The first call of
each engine is a warm-up, timed apart: static runs the whole workload (its one
program compiles), paged two groups (its decode step and common prefill shapes;
a prefill shape first met later compiles inside a timed run), transformers one
short row. Temperature 1 throughout.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

from rlvr_jax.models import load_pretrained, save_pretrained
from rlvr_jax.models.transformer import init_model
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.sampling.engine_rollout import Request
from rlvr_jax.sampling.rows import context_bucket
from rlvr_jax.testing import bench_config

P99_OVER_MEDIAN = 8.0
SIGMA = float(np.log(P99_OVER_MEDIAN) / 2.326)  # z(0.99) = 2.326


@dataclasses.dataclass(frozen=True)
class Workload:
    prompts: list  # P token lists
    group: int  # G
    lengths: np.ndarray  # [P * G] response length of row r (answers prompt r // G)

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def longest(self) -> int:
        return int(self.lengths.max())

    @property
    def necessary(self) -> int:
        """Token-steps any engine must compute: each prompt once, each response token."""
        return sum(map(len, self.prompts)) + int(self.lengths.sum())


def make_workload(
    vocab: int, prompts: int, group: int, pmin: int, pmax: int, median: int, kind: str, seed=0
) -> Workload:
    """The benchmark's prompts and per-row response lengths (see the module docstring)."""
    rng = np.random.RandomState(seed)
    plens = rng.randint(pmin, pmax + 1, prompts)
    toks = [rng.randint(3, vocab, n).tolist() for n in plens]
    cap = int(round(P99_OVER_MEDIAN * median))
    if kind == "longtail":
        lengths = np.clip(np.round(rng.lognormal(np.log(median), SIGMA, prompts * group)), 1, cap)
    elif kind == "uniform":
        mean = median * np.exp(SIGMA**2 / 2)
        lengths = np.full(prompts * group, round(mean))
    else:
        raise ValueError(f"--lengths {kind!r}: choose longtail or uniform")
    return Workload(toks, group, lengths.astype(np.int64))


# ------------------------------------------------------------------ engines
def paged_runner(model, w: Workload, slots: int, page_size: int, chunk: int):
    """Rows through `Engine.generate` with their own lengths."""
    max_len = max(map(len, w.prompts)) + w.longest
    sampler = Sampler(
        model, engine="paged", max_length=max_len, page_size=page_size, decode_slots=slots,
        prefill_chunk=chunk,
    )  # fmt: skip
    engine = sampler.paged_engine()
    reqs = [
        Request(r, tuple(w.prompts[r // w.group]), r // w.group, int(n), temperature=1.0)
        for r, n in enumerate(w.lengths)
    ]

    def run(seed, warm=False):
        if warm:  # two groups: compiles the decode step and the common prefill shapes
            return engine.generate(reqs[: 2 * w.group], jax.random.key(seed))
        out = engine.generate(reqs, jax.random.key(seed))
        assert sum(len(o.tokens) for o in out.values()) == w.lengths.sum()
        st = engine.stats
        computed = slots * st.decode_steps + st.prefill_lane_tokens
        return dict(
            waste=computed - w.necessary,
            decode_steps=st.decode_steps,
            decode_s=st.decode_seconds,
            preemptions=st.preemptions,
        )

    return run


def static_runner(model, w: Workload):
    rows = len(w.lengths)
    ctx_pad = context_bucket(max(map(len, w.prompts)))
    max_len = ctx_pad + w.longest
    sampler = Sampler(model, max_length=max_len)
    params = SamplingParams(temperature=1.0, max_new_tokens=w.longest, n=w.group)

    def run(seed, warm=False):  # warm: the same call (its program is one shape)
        out = sampler.sample(w.prompts, params, jax.random.key(seed))
        assert out.response_mask.sum() == rows * w.longest
        rows_pad = -(-rows // sampler.batch_multiple) * sampler.batch_multiple
        computed = rows_pad * (ctx_pad + w.longest)
        return dict(waste=computed - w.necessary, decode_steps=w.longest)

    return run


def hf_runner(hf_dir, w: Workload):
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    rows = [p for p in w.prompts for _ in range(w.group)]
    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(rows):
        ids[b, width - len(p) :], mask[b, width - len(p) :] = torch.tensor(p), 1
    kw = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=w.longest,
        min_new_tokens=w.longest, pad_token_id=0, eos_token_id=None, attention_mask=mask,
    )  # fmt: skip

    def run(seed, warm=False):
        torch.manual_seed(seed)
        if warm:  # nothing to compile: one short row
            with torch.no_grad():
                return hf.generate(ids[:1], **(kw | dict(max_new_tokens=4, min_new_tokens=4,
                                                         attention_mask=mask[:1])))  # fmt: skip
        with torch.no_grad():
            out = hf.generate(ids, **kw)
        assert out.shape == (len(rows), width + w.longest)
        computed = len(rows) * (width + w.longest)
        return dict(waste=computed - w.necessary, decode_steps=w.longest)

    return run


def tunix_runner(hf_dir, w: Workload, cfg):
    """google-tunix's vanilla Sampler on the same weights (`scripts/bench_rollout_tunix.py`)."""
    mod = importlib.import_module("bench_rollout_tunix")
    return mod.runner(hf_dir, w, cfg)


# ------------------------------------------------------------------ driver
def timed(fn, seed, **kw):
    wall, cpu = time.perf_counter(), time.process_time()
    extra = fn(seed, **kw)
    return time.perf_counter() - wall, time.process_time() - cpu, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="3m", choices=["3m", "30m"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-min", type=int, default=64)
    ap.add_argument("--prompt-max", type=int, default=512)
    ap.add_argument("--median", type=int, default=32, help="median response length m")
    ap.add_argument("--lengths", default="longtail", choices=["longtail", "uniform"])
    ap.add_argument("--slots", type=int, default=128, help="paged engine decode slots S")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--prefill-chunk", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--engines", default="paged,static,transformers")
    ap.add_argument("--tunix-path", default="", help="site dir with google-tunix (adds it)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    if args.tunix_path:
        sys.path.insert(0, args.tunix_path)
        engines.append("tunix")
    cfg = bench_config(args.size)
    w = make_workload(
        cfg.vocab_size, args.prompts, args.group, args.prompt_min, args.prompt_max,
        args.median, args.lengths,
    )  # fmt: skip
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(
        f"machine: {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), jax "
        f"{jax.__version__} ({jax.default_backend()}), torch {torch.__version__}; load "
        f"{os.getloadavg()}\nworkload: qwen3-{args.size} ({cfg.num_params() / 1e6:.1f}M), "
        f"{args.prompts} prompts x G={args.group}, prompts {args.prompt_min}-{args.prompt_max} "
        f"tokens (mean {np.mean([len(p) for p in w.prompts]):.0f}), {args.lengths} lengths: "
        f"median {np.median(w.lengths):.0f}, mean {w.lengths.mean():.1f}, p99 "
        f"{np.percentile(w.lengths, 99):.0f}, max {w.longest}, {int(w.lengths.sum())} tokens"
    )
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(init_model(cfg, seed=0), cfg, d)
        model, cfg = load_pretrained(d)
        build = {
            "paged": lambda: paged_runner(model, w, args.slots, args.page_size, args.prefill_chunk),
            "static": lambda: static_runner(model, w),
            "transformers": lambda: hf_runner(d, w),
            "tunix": lambda: tunix_runner(d, w, cfg),
        }
        runners, first = {}, {}
        for e in engines:
            runners[e] = build[e]()
            first[e] = timed(runners[e], 0, warm=True)[0]
            print(f"  {e}: warm-up call {first[e]:.1f} s", flush=True)
        results = {e: [] for e in engines}
        for r in range(args.repeats):  # alternate, so drift hits every engine alike
            for e in engines:
                results[e].append(timed(runners[e], r + 1))
                print(f"  {e} repeat {r}: {results[e][-1][0]:.1f} s wall", flush=True)
    tokens = int(w.lengths.sum())
    print(
        "\n| engine | tokens/s | wall s | CPU s | wasted token-steps | decode steps "
        "| warm-up call s |\n|---|---|---|---|---|---|---|"
    )
    base = statistics.median(x[0] for x in results["static"]) if "static" in results else None
    for e in engines:
        wall = statistics.median(x[0] for x in results[e])
        cpu = statistics.median(x[1] for x in results[e])
        extra = results[e][-1][2]
        rel = f" ({base / wall:.2f}x static)" if base else ""
        print(
            f"| {e} | {tokens / wall:.0f}{rel} | {wall:.1f} | {cpu:.1f} | {extra['waste']} "
            f"| {extra['decode_steps']} | {first[e]:.1f} |"
        )
    if "paged" in results:
        extra = results["paged"][-1][2]
        print(
            f"\npaged: {extra['decode_s']:.1f} s in decode calls over {extra['decode_steps']} "
            f"steps ({1e3 * extra['decode_s'] / extra['decode_steps']:.2f} ms/step at "
            f"S={args.slots}), {extra['preemptions']} preemptions"
        )


if __name__ == "__main__":
    main()
