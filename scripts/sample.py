"""Sample a group of responses from a Hugging Face checkpoint directory.

Usage:
  python scripts/sample.py --model /path/to/Qwen3-0.6B --prompt "What is 17 * 23?" --n 4
  python scripts/sample.py --demo      # a tiny random Qwen3 + character tokenizer, no files needed

The model directory needs config.json, model.safetensors (or a sharded index)
and a tokenizer (tokenizer.json or tokenizer.model).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import jax

from rlvr_jax.models import init_model, load_pretrained, save_pretrained
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.tokenizers import load_tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="Hugging Face model directory")
    ap.add_argument("--demo", action="store_true", help="use a tiny random model instead")
    ap.add_argument("--prompt", default="What is 3 + 4?")
    ap.add_argument("--n", type=int, default=4, help="samples in the group")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if bool(args.model) == args.demo:
        ap.error("give exactly one of --model PATH or --demo")

    if args.demo:
        tok = toy_tokenizer(vocab_size=128)
        path = tempfile.mkdtemp(prefix="rlvr_jax_demo_")
        cfg = tiny_config("qwen3", vocab_size=tok.vocab_size, eos_token_id=tok.eos_id)
        save_pretrained(init_model(cfg, seed=args.seed), cfg, path)
        print(f"demo: random {cfg.num_params() / 1e3:.0f}k-param Qwen3 saved to {path}")
    else:
        path, tok = args.model, load_tokenizer(args.model)
    model, cfg = load_pretrained(path)
    prompt = tok.encode_chat([{"role": "user", "content": args.prompt}])
    params = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=args.max_new_tokens,
        stop_token_ids=tuple(tok.stop_ids),
        n=args.n,
    )
    t = time.perf_counter()
    out = Sampler(model, pad_id=tok.pad_id or 0).sample([prompt], params, jax.random.key(args.seed))
    secs = time.perf_counter() - t
    for b in range(out.tokens.shape[0]):
        ids = out.sampled_tokens(b)
        mean_lp = out.logps[b][out.response_mask[b]].mean()
        print(f"--- sample {b} ({len(ids)} tokens, mean log-prob {mean_lp:.2f}, "
              f"stopped={bool(out.stopped[b])})\n{tok.decode(ids)!r}")  # fmt: skip
    print(f"{int(out.response_mask.sum())} tokens in {secs:.1f}s (first call includes compilation)")


if __name__ == "__main__":
    main()
