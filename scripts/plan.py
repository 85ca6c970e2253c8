"""Ahead-of-time memory plan of a run config on N (fake CPU) devices; nothing is allocated.

  python scripts/plan.py --config experiments/paper_scale/qwen3_8b_grpo.py --mesh 1,64,1 \
      [--rules fsdp] [--devices 64] [--param-dtype bfloat16 --dtype bfloat16] [--full] \
      [--json out.json]
  python scripts/plan.py --config experiments/dpo/dpo.py:staged,paper --stage sft
  python scripts/plan.py --all-paper [--doc docs/tpu_pods.md] > all_paper.log
  python scripts/plan.py --table-from all_paper.log   # rewrite the table from a log
  python scripts/plan.py --engine-memory 8192,16384,32768 [--model qwen3-8b --chip v5p]
      # rows in flight per chip: paged engine vs static sampler (rlvr_jax/plan_engine.py)

Compiles the train step (one micro-batch) and the sampler for the mesh and prints
per-device bytes (see rlvr_jax/plan.py). By default the programs are compiled at
2 and 4 layers and XLA's numbers are extrapolated linearly to the full depth
(`--full` compiles every layer: slow on a small CPU).

`--all-paper` plans the `:paper` variant of every experiment file: variants whose
programs need the same memory (model, mesh, batch and length, per-token loss inputs,
optimizer; `plan_key`) share one plan, compiled for the first of them in its own
process (the fake device count is fixed when JAX starts); the table (per-chip GiB
against a v5p chip, headroom, fits or what would make it fit) replaces the block
between the PAPER_BEGIN/PAPER_END markers of `--doc`.

A pipeline config (rlvr_jax.pipeline) is planned stage by stage (`--stage`; in
`--all-paper` every trainable stage of the file's variant with all its stages
(PIPELINE_VARIANTS, else "paper"), named `file[stage]`): an rl / opd stage as an RL
config; a dpo stage as the RL train step on its update's rows (2 per pair, every pair
of a step in one program) and its sampler; an SFT stage's train step alone
(`plan.sft_plan_from_config`: its data sampling is not planned), whose sampler columns
read "-". A merge stage runs on the host and has no plan.
"""

import argparse
import copy
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_BEGIN, PAPER_END = "<!-- plan.py --all-paper: begin -->", "<!-- plan.py --all-paper: end -->"
V5P_GIB = 95e9 / (1 << 30)  # HBM of a v5p chip
MARGIN = 0.10  # "fits": both programs leave at least this share of the HBM free
# Pipeline files whose :paper variant lacks some of their stages: the variant that has all.
PIPELINE_VARIANTS = {"seq_opd_rl/pipeline": "all,paper", "dpo/dpo": "staged,paper"}


def load_config(spec: str):
    """`file.py[:variant]` -> the experiment's config."""
    path, _, variant = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("experiment_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)  # imports jax, but its CPU backend starts only later
    return module.get_config(variant)


def engine_memory(args) -> None:
    """Prints the paged-vs-dense rows-in-flight table for each N of `--engine-memory`."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    from rlvr_jax import plan, plan_engine
    from rlvr_jax.models import presets

    config = presets.preset(args.model or "qwen3-8b")
    layers = None if args.full else tuple(int(x) for x in args.layers.split(","))
    plans = []
    for n in (int(x) for x in args.engine_memory.split(",")):
        start, cpu = time.time(), time.process_time()
        plans.append(plan_engine.engine_memory_plan(
            config, hbm_bytes=plan.HBM_BYTES[args.chip], prompt_len=args.prompt_len,
            max_new_tokens=n, group=args.group, page_size=args.page_size, layers=layers,
        ))  # fmt: skip
        row = plans[-1].row()
        row.update(wall_s=round(time.time() - start), cpu_s=round(time.process_time() - cpu))
        print(json.dumps(row), flush=True)
    print(plan_engine.format_table(plans, args.chip))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="", help="experiment file, optionally file.py:variant")
    p.add_argument("--stage", default="", help="a pipeline config's stage to plan")
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
    p.add_argument("--json", default="", help="also write the plan's numbers here")
    p.add_argument("--all-paper", action="store_true", help="plan every :paper variant")
    p.add_argument("--only", default="", help="--all-paper: only the plans of these names")
    p.add_argument("--doc", default="docs/tpu_pods.md", help="--all-paper: the doc to update")
    p.add_argument("--table-from", default="", help="rewrite --doc's table from an --all-paper log")
    p.add_argument(
        "--engine-memory", default="", help="response lengths N: paged vs dense rows per chip"
    )
    p.add_argument("--chip", default="v5p", help="--engine-memory: the chip (plan.HBM_BYTES)")
    p.add_argument("--group", type=int, default=16, help="--engine-memory: G per prompt")
    p.add_argument("--page-size", type=int, default=16, help="--engine-memory: Z")
    args = p.parse_args()
    if args.engine_memory:
        return engine_memory(args)
    if args.table_from:
        lines = Path(args.table_from).read_text().splitlines()
        rows = [json.loads(x) for x in lines if x.startswith("{")]
        return _write(rows, sum(r["cpu_s"] for r in rows), args, pending=0)
    if args.all_paper:
        return all_paper(args)
    if not args.config:
        p.error("--config is required (or --all-paper)")

    base = load_config(args.config)
    config = stage_run(base, args.stage)
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
    if is_sft(config):
        result = plan.sft_plan_from_config(config, base, prompt_len=args.prompt_len, layers=layers)
    else:
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
    if args.json:
        gib = 1 << 30
        Path(args.json).write_text(
            json.dumps(
                dict(
                    devices=devices,
                    mesh=list(result.mesh_shape),
                    layers=list(result.compiled_layers),
                    num_layers=result.model.num_layers,
                    train_rows=result.train_rows,
                    train_length=result.train_length,
                    train_peak_gib=result.train.peak / gib,
                    sample_rows=result.sample_rows,
                    sample_calls=result.sample_calls,
                    sample_peak_gib=result.sample.peak / gib,
                    kv_cache_gib=result.kv_cache_bytes / gib,
                    work_gib=result.work_bytes / gib,
                )
            )
        )


def is_sft(c) -> bool:
    """Whether run config `c` is an SFT stage's (it samples no rollouts)."""
    return "rollout" not in c


def stage_run(c, stage: str):
    """The config a plan compiles: `c` itself, or the run config of pipeline `c`'s `stage`
    (a dpo stage's with its update's rows as the micro-batch: 2 rows per pair, all pairs
    of a step in one program)."""
    from rlvr_jax.pipeline.config import is_pipeline, stage_names

    if not is_pipeline(c):
        if stage:
            raise SystemExit(f"--stage {stage}: the config is not a pipeline")
        return c
    names = [n for n in stage_names(c) if c.stages[n].kind != "merge"]
    if stage not in names:
        raise SystemExit(f"--stage {stage!r}; a pipeline config needs one of {names}")
    s = c.stages[stage]
    run = s.run
    if s.kind == "dpo":
        run = copy.deepcopy(run)
        run.train.micro_batch_size = 2 * run.data.prompts_per_step * run.dpo.pairs_per_group
    return run


def paper_configs():
    """{experiment name: the config a plan compiles} for every file with a `paper` variant
    (a pipeline's trainable stages as `file[stage]`), and the names of the files
    without one (their get_config('paper') raises ValueError)."""
    from rlvr_jax.pipeline.config import is_pipeline, stage_names

    found, without = {}, []
    for path in sorted(ROOT.glob("experiments/*/*.py")):
        name = f"{path.parent.name}/{path.stem}"
        if path.stem == "repro" or "def get_config" not in path.read_text():
            continue
        variant = PIPELINE_VARIANTS.get(name, "paper")
        try:
            c = load_config(f"{path}:{variant}")
        except ValueError:
            without.append(name)
            continue
        if not is_pipeline(c):
            found[name] = c
            continue
        for stage in stage_names(c):
            if c.stages[stage].kind != "merge":
                found[f"{name}[{stage}]"] = (stage_run(c, stage), c)
    return found, without


def plan_args(name: str) -> list[str]:
    """The --config (and --stage) arguments that plan `name` (a file or `file[stage]`)."""
    file, _, stage = name.rstrip("]").partition("[")
    spec = ["--config", f"experiments/{file}.py:{PIPELINE_VARIANTS.get(file, 'paper')}"]
    return spec + (["--stage", stage] if stage else [])


def plan_key(c) -> str:
    """What the planned programs depend on: variants with equal keys share a plan."""
    from rlvr_jax import plan

    if isinstance(c, tuple):  # a pipeline stage: (its run config, the pipeline)
        run, base = c
        if not is_sft(run):
            return plan_key(run)
        return json.dumps(
            dict(
                sft=repr(plan.policy_config(base)),
                execution=run.model.to_dict(),
                mesh=[list(run.mesh.shape), run.mesh.rules],
                rows=run.train.batch_size,
                length=run.data.max_new_tokens,
            ),
            sort_keys=True,
        )
    return json.dumps(
        dict(
            model=repr(plan.policy_config(c)),
            execution=[c.model[k] for k in ("param_dtype", "dtype", "attention", "remat")]
            + [c.model.attention_block, c.model.scan_layers],
            mesh=[list(c.mesh.shape), c.mesh.rules],
            batch=[c.data.prompts_per_step, c.data.group_size],
            micro=c.train.micro_batch_size,
            rollout=[c.rollout.max_new_tokens, c.rollout.cache_gib, c.rollout.cache_dtype],
            loss=_loss_inputs(c),
            optimizer=[c.optimizer.name, c.optimizer.to_dict()[c.optimizer.name]]
            if c.optimizer.name != "adamw"
            else "adamw",
        ),
        sort_keys=True,
        default=str,
    )


def _loss_inputs(c) -> list:
    """The loss's inputs beyond [rows, T] ones: per-token vectors (hidden states, top-k
    teacher log-probs) change the plan; losses that differ only in elementwise terms
    over [rows, T] (clip rules, gates, a ref/behaviour log-prob input: < 1 MiB per chip
    at one row of 9216 tokens) share one."""
    from rlvr_jax.rl import objectives

    requires = objectives.POLICY_LOSSES.get(c.loss.name).requires
    wide = sorted(f for f in requires if f.endswith(("_BxTxD", "_BxTxK")))
    return [wide, c.score.teacher_topk.k if any(f.endswith("_BxTxK") for f in wide) else 0]


def _fit(r) -> str:
    """'yes', or 'no: ' and what would make it fit (per-chip GiB in `r`).

    The sampler's remedy is an estimate: its peak taken as a full bf16 copy of the
    weights (gathered for decoding) plus a part linear in the rows of a call.
    """
    from rlvr_jax.models import presets

    limit = (1 - MARGIN) * V5P_GIB
    fixes = []
    if r["sample_peak_gib"] > limit:
        weights = presets.preset(r["model"]).num_params() * 2 / (1 << 30) / r["mesh"][2]
        per_row = (r["sample_peak_gib"] - weights) / r["sample_rows"]
        rows = int((limit - weights) / per_row) if limit > weights else 0
        shards = r["mesh"][0] * r["mesh"][1]  # a call's rows split over data x fsdp
        rows -= rows % shards
        if rows:
            budget = (r["kv_cache_gib"] + r["work_gib"]) * rows / r["sample_rows"]
            fixes.append(f"sampler: <= ~{rows} rows per call (rollout.cache_gib ~{budget:.0f})")
        else:
            fixes.append(
                "sampler: its gathered weights leave no room for one row per chip: "
                "shard them over the tensor axis (mesh (1, chips/4, 4), rules fsdp_tp)"
            )
    if r["train_peak_gib"] > limit:
        fixes.append("train: more chips or a shorter N")
    return "yes" if not fixes else "no: " + "; ".join(fixes)


def all_paper(args) -> None:
    from rlvr_jax.models import presets

    configs, without = paper_configs()
    groups: dict[str, list[str]] = {}
    for name, c in configs.items():
        groups.setdefault(plan_key(c), []).append(name)
    configs = {n: c[1] if isinstance(c, tuple) else c for n, c in configs.items()}
    print(f"{len(configs)} :paper variants, {len(groups)} distinct plans; without: {without}")
    rows, total_cpu = [], 0.0
    if args.only:
        only = set(args.only.split(","))
        groups = {k: v for k, v in groups.items() if only & set(v)}
    for names in sorted(groups.values(), key=len, reverse=True):  # most variants first
        c = configs[names[0]]
        out = Path(f"/tmp/plan_{os.getpid()}.json")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        cmd = [sys.executable, __file__, *plan_args(names[0])]
        cmd += ["--layers", args.layers, "--json", str(out), "--prompt-len", str(args.prompt_len)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        total_cpu += cpu
        preset = presets.preset_for_path(c.model.path)
        row = dict(names=names, model=preset, cpu_s=cpu, wall_s=time.time() - start)
        if done.returncode:
            row["error"] = done.stderr.strip().splitlines()[-1][:200]
        else:
            row.update(json.loads(out.read_text()))
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(rows, total_cpu, args, pending=len(groups) - len(rows))  # after every plan
    print(f"wrote {args.doc}; {total_cpu:.0f} CPU s in all")


def _write(rows, total_cpu, args, pending: int) -> None:
    table = _table(rows, total_cpu, args)
    if pending:
        table += f"\n({pending} more plans not yet run.)\n"
    doc = ROOT / args.doc
    text = doc.read_text()
    if PAPER_BEGIN not in text or PAPER_END not in text:
        raise SystemExit(f"{args.doc} has no {PAPER_BEGIN} ... {PAPER_END} block")
    head, rest = text.split(PAPER_BEGIN, 1)
    doc.write_text(head + PAPER_BEGIN + "\n" + table + PAPER_END + rest.split(PAPER_END, 1)[1])


def _table(rows, total_cpu, args) -> str:
    lines = [
        f"Planned by `python scripts/plan.py --all-paper` (P = {args.prompt_len}, compiled at "
        f"{args.layers} layers and extrapolated; {total_cpu:.0f} CPU s in all). Per-chip GiB "
        f"against a v5p chip's {V5P_GIB:.1f} GiB; headroom = 1 - the larger peak / HBM; fits = "
        f"both programs leave >= {MARGIN:.0%}.",
        "",
        "| `:paper` variants | model | chips | P + N | train rows/chip | train peak | "
        "sampler rows/call (calls/step) | KV cache | sampler peak | headroom | fits | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        names = ", ".join(f"`{n}`" for n in r["names"])
        if "error" in r:
            lines.append(
                f"| {names} | {r['model']} | | | | | | | | | plan failed: "
                f"{r['error']} | {r['cpu_s']:.0f} |"
            )
            continue
        peak = max(r["train_peak_gib"], r["sample_peak_gib"])
        shards = r["mesh"][0] * r["mesh"][1]
        sampler = (  # an SFT stage's plan has no sampler
            f"{r['sample_rows']} ({r['sample_calls']}) | {r['kv_cache_gib']:.1f} | "
            f"{r['sample_peak_gib']:.1f}"
            if r["sample_rows"]
            else "- | - | -"
        )
        lines.append(
            f"| {names} | {r['model']} | {r['devices']} | {r['train_length']} | "
            f"{r['train_rows'] // shards} | {r['train_peak_gib']:.1f} | {sampler} | "
            f"{1 - peak / V5P_GIB:.0%} | {_fit(r)} | {r['cpu_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
