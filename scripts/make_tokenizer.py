"""Build the shipped sentencepiece tokenizer of the synthetic tasks (deterministic).

Usage:
  python scripts/make_tokenizer.py                    # rewrites rlvr_jax/assets/rlvr_tasks_sp.model
  python scripts/make_tokenizer.py --output /tmp/sp.model --vocab-size 2048

With the defaults the output is byte-identical to the shipped file
(tests/data/test_vocab.py checks it). Takes ~10 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import time

from rlvr_jax.data import vocab
from rlvr_jax.tokenizers import load_tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", default=str(vocab.DEFAULT_TOKENIZER_PATH))
    ap.add_argument("--vocab-size", type=int, default=vocab.DEFAULT_VOCAB_SIZE)
    ap.add_argument("--num-per-task", type=int, default=vocab.DEFAULT_NUM_PER_TASK)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    start = time.perf_counter()
    path = vocab.train_tokenizer(
        args.output, vocab_size=args.vocab_size, num_per_task=args.num_per_task, seed=args.seed
    )
    seconds = time.perf_counter() - start
    tok = load_tokenizer(path)
    print(f"wrote {path}: {path.stat().st_size} bytes, vocab {tok.vocab_size}, {seconds:.1f} s")
    print(f"pad={tok.pad_id} bos={tok.bos_id} eos={tok.eos_id} stop_ids={tok.stop_ids}")


if __name__ == "__main__":
    main()
