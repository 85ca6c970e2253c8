"""Suite evaluation speed: problems batched on the paged engine vs one static call each.

  python scripts/bench_eval_suite.py --size 3m --problems 64 --n 4 --max-new-tokens 64

A random model of `testing.bench_config(size)` shape with the shipped tokenizer's
vocabulary samples a synthetic MATH-500 file (the release's fields: problem,
solution, answer, subject, level, unique_id; arithmetic questions written here) with
`eval.run_suite`, once per engine: "paged" (`prompts_per_batch` problems per engine
call, each problem's n rows sharing one prefill) and "static" (one static-sampler
call of n rows per problem, the pre-engine path). A random model rarely stops, so
rows run close to the token budget: this measures batching, not the long tail.
Prints wall and CPU seconds, sampled tokens per CPU second, and the speed-up.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rlvr_jax.eval import Settings, run_suite
from rlvr_jax.models import init_model
from rlvr_jax.models.tiny import bench_config
from rlvr_jax.tokenizers import SentencePieceTokenizer

SP_MODEL = Path(__file__).resolve().parents[1] / "rlvr_jax" / "assets" / "rlvr_tasks_sp.model"


def write_math500(directory: Path, problems: int) -> None:
    """`problems` rows in MATH-500's test.jsonl layout (the questions are made up here)."""
    out = directory / "math500"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(problems):
        a, b = 3 + 7 * i % 50, 11 + 5 * i % 40
        rows.append(
            dict(
                problem=f"What is ${a} + {b} \\times 2$?",
                solution=f"${a} + {2 * b} = \\boxed{{{a + 2 * b}}}$.",
                answer=str(a + 2 * b),
                subject="Prealgebra",
                level=1 + i % 5,
                unique_id=f"test/prealgebra/{i}.json",
            )
        )
    (out / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="3m")
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--n", type=int, default=4, help="samples per problem")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32, help="problems per paged-engine call")
    ap.add_argument("--engines", default="paged,static")
    args = ap.parse_args()
    tok = SentencePieceTokenizer(SP_MODEL)
    config = bench_config(args.size)
    config = type(config)(**{**config.__dict__, "vocab_size": tok.vocab_size,
                             "eos_token_id": tok.eos_id})  # fmt: skip
    model = init_model(config, seed=0)
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        write_math500(data, args.problems)
        for engine in args.engines.split(","):
            settings = Settings(
                n_samples=args.n, ks=(1,), temperature=1.0, max_new_tokens=args.max_new_tokens,
                seed=0, engine=engine, prompts_per_batch=args.batch, benchmarks=("math500",),
            )  # fmt: skip
            w0, c0 = time.perf_counter(), time.process_time()
            res = run_suite(model, tok, "math", data, settings, show_progress=False)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            probs = res["benchmarks"]["math500"]["problems"]
            tokens = sum(p["mean_length"] * args.n for p in probs)  # re-encoded responses
            times[engine] = cpu
            print(
                f"{engine:>6}: {len(probs)} problems x {args.n}, {wall:.1f} s wall, "
                f"{cpu:.1f} s CPU, {tokens / len(probs) / args.n:.1f} tokens per response, "
                f"{tokens / cpu:.0f} response tokens per CPU s"
            )
    if {"paged", "static"} <= set(times):
        print(f"paged / static speed (CPU): {times['static'] / times['paged']:.2f}x")


if __name__ == "__main__":
    main()
