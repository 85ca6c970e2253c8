"""Ahead-of-time memory plan of a run config on N (fake CPU) devices; nothing is allocated.

  python scripts/plan.py --config experiments/paper_scale/qwen3_8b_grpo.py --mesh 1,64,1 \
      [--rules fsdp] [--devices 64] [--param-dtype bfloat16 --dtype bfloat16] [--full]

Compiles the train step (one micro-batch) and the sampler for the mesh and prints
per-device bytes (see rlvr_jax/plan.py). By default the programs are compiled at
2 and 4 layers and XLA's numbers are extrapolated linearly to the full depth
(`--full` compiles every layer: slow on a small CPU).
"""

import argparse
import importlib.util
import math
import os
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="experiment file, optionally file.py:variant")
    p.add_argument("--mesh", default="", help="data,fsdp,tensor (default: config.mesh.shape)")
    p.add_argument("--rules", default="", help="sharding preset (default: config.mesh.rules)")
    p.add_argument("--devices", type=int, default=0, help="fake devices (default: the mesh's)")
    p.add_argument("--model", default="", help="models.presets name overriding config.model")
    p.add_argument("--param-dtype", default="", choices=("", "float32", "bfloat16"))
    p.add_argument("--dtype", default="", choices=("", "float32", "bfloat16"))
    p.add_argument("--prompt-len", type=int, default=1024, help="P, padded prompt tokens")
    p.add_argument("--max-new-tokens", type=int, default=0, help="N (default: the config's)")
    p.add_argument(
        "--sample-rows", type=int, default=0, help="rows per sampler call (default: the trainer's)"
    )
    p.add_argument("--layers", default="2,4", help="two depths to extrapolate from")
    p.add_argument("--full", action="store_true", help="compile every layer (no extrapolation)")
    args = p.parse_args()

    path, _, variant = args.config.partition(":")
    spec = importlib.util.spec_from_file_location("experiment_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports jax, but its CPU backend starts only later
    config = module.get_config(variant)
    shape = tuple(int(s) for s in args.mesh.split(",")) if args.mesh else tuple(config.mesh.shape)
    devices = args.devices or (math.prod(shape) if -1 not in shape else 0)
    if not devices:
        raise SystemExit(f"mesh {shape} has a -1: pass --devices N")
    # The flag is read when jax starts its CPU backend (the first jax.devices() call).
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    )
    os.environ["JAX_PLATFORMS"] = "cpu"

    from rlvr_jax import plan

    layers = None if args.full else tuple(int(x) for x in args.layers.split(","))
    start = time.time()
    result = plan.plan_from_config(
        config,
        mesh_shape=shape,
        rules=args.rules or None,
        model=args.model,
        param_dtype=args.param_dtype,
        dtype=args.dtype,
        prompt_len=args.prompt_len,
        sample_rows=args.sample_rows,
        max_new_tokens=args.max_new_tokens,
        layers=layers,
    )
    print(result.format())
    print(f"(planned in {time.time() - start:.0f} s on {devices} fake CPU devices)")


if __name__ == "__main__":
    main()
