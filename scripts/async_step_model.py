"""An estimated RL step time on a TPU slice: synchronous vs asynchronous (a model, not a run).

Usage:
  python scripts/async_step_model.py                      # Qwen3-8B :dapo on v5p-128 (64 chips)
  python scripts/async_step_model.py --mean-len 2500 --chips 32 --rows 4096

Every number it prints is an estimate from the stated inputs, none measured on a
TPU. Inputs (defaults): the Qwen3-8B `:dapo` config (B x G = 512 x 16 rows, prompt
P = 1024, cap N = 8192 new tokens) and its memory plan (docs/tpu_pods.md: 26 rows
per chip per sampler call in a 40 GiB bf16 KV budget, 5 calls per step); a v5p
chip's 2.76 TB/s HBM and 459 TFLOP/s bf16; the assumed efficiencies: decode reads
at `--bw-eff` of peak bandwidth, the update runs at `--mfu` of peak FLOP/s; the
response lengths' mean `--mean-len` (the static sampler's calls each run to the cap
N, the long tail's longest row).

  decode step (one chip)  = (bf16 weights + KV bytes read) / (bandwidth x bw_eff)
  static rollout          = calls x N decode steps, KV read at P + N/2 per row
  paged rollout           = rows x mean_len tokens / (chips x slots) decode steps,
                            slots = KV budget / (P + mean_len) tokens per row,
                            KV read at P + mean_len/2 per row; at least N steps of
                            a nearly empty batch (the longest row ends the step)
  update                  = 8 x params x tokens / (chips x peak x mfu)
                            (6 N T forward+backward + 2 N T for π_old's forward)
  sync step               = rollout + update on all chips
  async, colocated        = the same chips alternate: device time as sync (only
                            host-side work such as verification overlaps)
  async, disaggregated    = R rollout chips + L learner chips, R + L = chips:
                            max(rollout on R, update on L) + weight push (bf16
                            weights over `--push-gbps`), R chosen best
  async + partial         = disaggregated paged without the longest-row floor: rows
                            that outlive an update continue under the new weights
"""

from __future__ import annotations

import argparse
import math


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=8.19e9)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--chips", type=int, default=64)
    ap.add_argument("--rows", type=int, default=512 * 16)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--cap", type=int, default=8192)
    ap.add_argument("--mean-len", type=float, default=4000.0)
    ap.add_argument("--rows-per-chip-call", type=int, default=26)
    ap.add_argument("--kv-gib", type=float, default=40.0)
    ap.add_argument("--bw", type=float, default=2.76e12)
    ap.add_argument("--bw-eff", type=float, default=0.7)
    ap.add_argument("--peak", type=float, default=459e12)
    ap.add_argument("--mfu", type=float, default=0.4)
    ap.add_argument("--push-gbps", type=float, default=25.0)
    a = ap.parse_args()

    weights = 2 * a.params  # bf16 bytes
    kv_tok = a.layers * a.kv_heads * a.head_dim * 2 * 2  # K and V, bf16
    bw = a.bw * a.bw_eff

    def static_rollout(chips):
        calls = math.ceil(a.rows / (chips * a.rows_per_chip_call))
        step = (weights + a.rows_per_chip_call * (a.prompt + a.cap / 2) * kv_tok) / bw
        return calls * a.cap * step

    def paged_rollout(chips, floor=True):
        slots = max(1, int(a.kv_gib * 2**30 / ((a.prompt + a.mean_len) * kv_tok)))
        steps = a.rows * a.mean_len / (chips * slots)
        t = steps * (weights + slots * (a.prompt + a.mean_len / 2) * kv_tok) / bw
        # The step waits for its longest row: N decode steps of a nearly empty batch.
        return max(t, a.cap * weights / bw) if floor else t

    def update(chips):
        tokens = a.rows * (a.prompt + a.mean_len)
        return 8 * a.params * tokens / (chips * a.peak * a.mfu)

    push = weights / (a.push_gbps * 1e9)

    def disaggregated(rollout):
        best = min(range(1, a.chips), key=lambda r: max(rollout(r), update(a.chips - r)))
        return best, max(rollout(best), update(a.chips - best)) + push

    sync_static = static_rollout(a.chips) + update(a.chips)
    sync_paged = paged_rollout(a.chips) + update(a.chips)
    r_s, dis_static = disaggregated(static_rollout)
    r_p, dis_paged = disaggregated(paged_rollout)
    r_q, dis_partial = disaggregated(lambda r: paged_rollout(r, floor=False))
    print(f"inputs: {a.params / 1e9:.2f}B params, {a.chips} chips, {a.rows} rows, P={a.prompt}, "
          f"N={a.cap}, mean response {a.mean_len:.0f}, KV {kv_tok / 1024:.0f} KiB/token, "
          f"bw {a.bw / 1e12:.2f} TB/s x {a.bw_eff}, "
          f"{a.peak / 1e12:.0f} TFLOP/s x mfu {a.mfu}")  # fmt: skip
    print(f"rollout on all chips: static {static_rollout(a.chips):.0f} s, "
          f"paged {paged_rollout(a.chips):.0f} s; update {update(a.chips):.0f} s; "
          f"weight push {push:.1f} s")  # fmt: skip
    print("\n| schedule | rollout engine | step s (estimate) | vs sync static |")
    print("|---|---|---|---|")
    rows = [
        ("sync", "static", sync_static),
        ("sync", "paged", sync_paged),
        ("async k=1, colocated", "static", sync_static),
        ("async k=1, colocated", "paged", sync_paged),
        (f"async k=1, disaggregated ({r_s} + {a.chips - r_s} chips)", "static", dis_static),
        (f"async k=1, disaggregated ({r_p} + {a.chips - r_p} chips)", "paged", dis_paged),
        (f"async k=1 + partial rollouts ({r_q} + {a.chips - r_q} chips)", "paged", dis_partial),
    ]
    for name, engine, t in rows:
        print(f"| {name} | {engine} | {t:.0f} | {sync_static / t:.2f}x |")


if __name__ == "__main__":
    main()
