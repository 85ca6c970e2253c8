"""Per-row memory of a sampler call, compiled vs `generate.work_bytes_per_row` (issue 17).

  python scripts/sampler_row_memory.py qwen3-8b 2 128x1024x1024 256x1024x1024 512x1024x1024

Compiles the paper block's sampler program (bf16 compute over f32 weights, bf16 KV
cache, blockwise attention, fsdp over 8 fake CPU devices) for the given preset cut to
the given depth, at each ROWSxPxN, and prints XLA's per-device memory. Between two row
counts at one P and N, the growth of temp per added row per device, less that row's KV
cache, is the working memory `work_bytes_per_row` estimates (printed alongside).
About 10 CPU s per compile.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

from rlvr_jax import plan, sharding  # noqa: E402
from rlvr_jax.models import presets  # noqa: E402
from rlvr_jax.sampling.generate import cache_slots, kv_cache_bytes, work_bytes_per_row  # noqa: E402

GIB = 1 << 30


def main():
    name, layers, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    mesh = sharding.make_mesh((1, 8, 1))
    cfg = presets.preset(name).replace(
        param_dtype="float32",
        dtype="bfloat16",
        attention="pallas",
        scan_layers=True,
        remat="block",
        num_layers=layers,
    )
    last = None
    for shape in shapes:
        rows, p, n = (int(x) for x in shape.split("x"))
        m = plan.Memory.of(plan._compile_sample(cfg, mesh, "fsdp", rows, p, n, "bfloat16"))
        kv = kv_cache_bytes(cfg, 1, cache_slots(cfg, p, n), "bfloat16")
        line = f"{name} L={layers} rows={rows} P={p} N={n}: temp {m.temp / GIB:.3f} GiB/device"
        if last is not None and last[1:3] == (p, n) and rows != last[0]:
            per_row = (m.temp - last[3]) / ((rows - last[0]) / 8) - kv
            est = work_bytes_per_row(cfg, p, n)
            line += f"; work per row {per_row / GIB:.3f} GiB, estimate {est / GIB:.3f} GiB"
        print(line, flush=True)
        last = (rows, p, n, m.temp)


if __name__ == "__main__":
    main()
