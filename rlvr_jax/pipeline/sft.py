"""The SFT stage: supervised fine-tuning from the previous export, checkpointed and resumable.

Data (`data.source`):
  reference  the task's reference solutions of `data.num_problems` problems.
  teacher    verified samples of a teacher: `data.teacher_samples` per prompt at
             `data.temperature`, the correct ones kept (an SFT cold start from
             a stronger model; RSTG's SFT on the teacher's correct solutions).
`data.filter = "all_wrong"` first keeps only the prompts on which the stage's
start policy got none of `data.filter_samples` samples right (RSTG: the
prompts where RL has no signal). The examples are built once and cached in the
stage directory (`sft_data.jsonl`, with counts in `sft_data.json`), so a
resumed stage trains on the same data.

Mesh and precision (`pipeline.execution`): an SFT run config made by
`sft_config()` has neither; its model is loaded in float32 and, multi-process
(`rlvr_jax.distributed`), sharded over every device of every process
(`stage_kind.spread`), each batch replicated. `execution.add_execution(c)` adds an
RL config's `mesh` and `model` execution fields: the model is loaded in those
dtypes, sharded on `mesh`, and each batch's rows are split over data x fsdp.

Multi-process: sampling for the data splits the problems over processes and
gathers the verified samples (`distributed.my_shard` / `gather_shards`), so
every process builds the same examples; process 0 writes the cache. Every
process builds each step's whole batch (a function of (seed, step)) and places
it as above (replicated, or its rows split), so the run equals the one-process
run of the same config up to float rounding; the in-stage evaluations split
their problems like the pipeline's.

Training reuses `rlvr_jax.train.sft` (masked next-token loss, AdamW with
warm-up and cosine decay); the batch of step i is a function of (seed, i), so
a checkpoint (params, optimizer state, step) resumes bitwise. The run
directory has what an RL run has: config.json, metrics.jsonl, checkpoints/,
results.md, export/.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax import distributed, sharding, tasks
from rlvr_jax.models import load_pretrained
from rlvr_jax.pipeline import execution
from rlvr_jax.pipeline.stage_kind import StageContext, task_options
from rlvr_jax.run.run_io import RunIO
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.tokenizers import cut_at_stop
from rlvr_jax.train import sft, warmstart
from rlvr_jax.train.evaluate import evaluate_task
from rlvr_jax.train.warmstart import load_model_tokenizer

log = logging.getLogger(__name__)

SOURCES = ("reference", "teacher")
FILTERS = ("", "all_wrong")
DATA_FILE, STATS_FILE = "sft_data.jsonl", "sft_data.json"


def sft_config() -> ml_collections.ConfigDict:
    """The SFT stage's run config; locked."""
    c = ml_collections.ConfigDict()
    c.seed = 0  # batch order and sampling
    c.task = ml_collections.ConfigDict(dict(name="countdown", options=""))  # as rl.config
    d = c.data = ml_collections.ConfigDict()
    d.source = "reference"  # one of SOURCES
    d.split = "train"
    d.start = 0  # first problem index (later rounds take fresh problems)
    d.num_problems = 2000
    d.filter = ""  # one of FILTERS
    d.filter_samples = 8  # G of the all-wrong filter
    # source "teacher": as the RL teacher signal's fields (warm_start / pretrained;
    # domain "" = the base's domain).
    d.teacher = ml_collections.ConfigDict(
        dict(source="warm_start", domain="", role="teacher", path="")
    )
    d.teacher_samples = 4  # samples per prompt; the correct ones become examples
    d.temperature = 1.0
    d.max_new_tokens = 64
    d.sample_prompts = 32  # prompts sampled together
    t = c.train = ml_collections.ConfigDict()
    t.steps = 200
    t.batch_size = 16
    t.lr = 1e-3  # peak lr: linear warm-up (5% of steps), cosine to end_lr_fraction
    t.end_lr_fraction = 0.1
    e = c.eval = ml_collections.ConfigDict()
    e.every = 0  # steps between in-stage evaluations (0 = only at the end)
    e.split = "test"
    e.num_problems = 64
    e.n_samples = 8
    e.temperature = 1.0
    c.checkpoint = ml_collections.ConfigDict(dict(every=50, keep=2, export_final=True))
    # The divergence guard (rlvr_jax.run.guard) after every step, as in RL runs.
    c.guard = ml_collections.ConfigDict(dict(max_grad_norm=1e6, max_param_abs=1e4))
    c.log = ml_collections.ConfigDict(dict(tensorboard=True, progress_every_s=1.0))
    c.lock()
    return c


def check(c, *, where: str, earlier) -> None:
    """Choices and ranges of an SFT run config; ValueError naming the field."""
    del earlier
    execution.check(c, where)
    for field, value, valid in (
        ("data.source", c.data.source, SOURCES),
        ("data.filter", c.data.filter, FILTERS),
    ):
        if value not in valid:
            raise ValueError(f"{where}.{field} = {value!r}; valid: {', '.join(map(repr, valid))}")
    counts = ("data.num_problems", "data.filter_samples", "data.teacher_samples")
    counts += ("train.steps", "train.batch_size", "eval.n_samples", "checkpoint.every")
    for field in counts:
        a, b = field.split(".")
        if c[a][b] < 1:
            raise ValueError(f"{where}.{field} = {c[a][b]}; must be >= 1")
    if c.data.teacher.source not in ("warm_start", "pretrained"):
        raise ValueError(
            f"{where}.data.teacher.source = {c.data.teacher.source!r}; "
            "valid: warm_start, pretrained"
        )
    if not c.checkpoint.export_final:
        raise ValueError(f"{where}.checkpoint.export_final must be True: the next stage needs it")
    if not math.isfinite(c.train.lr) or c.train.lr <= 0:
        raise ValueError(f"{where}.train.lr = {c.train.lr}; must be > 0")


def pulse(c) -> None:
    """A seconds-long CI run: 2 steps on 16 arithmetic problems, a tiny evaluation."""
    c.task.name, c.task.options = "arithmetic", ""
    c.data.num_problems, c.data.max_new_tokens = 16, 16
    c.data.filter_samples = c.data.teacher_samples = 2
    c.train.steps, c.train.batch_size = 2, 4
    c.eval.every, c.eval.num_problems, c.eval.n_samples = 0, 4, 2
    c.checkpoint.every = 1


def resolve(c, init_dir: str, base) -> None:
    """Empty task options get the base's warm-start ones; teacher domain "" = the base's."""
    del init_dir
    c.task.options = task_options(c.task.name, c.task.options, base)
    if not c.data.teacher.domain:
        c.data.teacher.domain = base.domain


# --------------------------------------------------------------------------- data
def sample_verified(
    model, tokenizer, task, problems, *, n, temperature, max_new_tokens, seed, prompts_per_call=32
):
    """`n` samples of each problem, decoded and verified.

    In a multi-process run each process samples its share of the problems
    (`distributed.my_shard`) and the results are gathered (a collective).

    Returns:
      One list per problem of (response text, correct) pairs (the same on every process).
    """
    stop = tokenizer.stop_ids
    params = SamplingParams(
        temperature=temperature, max_new_tokens=max_new_tokens, stop_token_ids=stop, n=n
    )
    sampler = Sampler(model, pad_id=tokenizer.pad_id if tokenizer.pad_id is not None else 0)
    key = jax.random.PRNGKey(seed)
    mine, out = distributed.my_shard(len(problems)), []
    for lo in range(0, len(mine), prompts_per_call):
        chunk = [problems[i] for i in mine[lo : lo + prompts_per_call]]
        prompts = [sft.encode_prompt(tokenizer, p.prompt) for p in chunk]
        ro = sampler.sample(prompts, params, jax.random.fold_in(key, lo))
        for g, p in enumerate(chunk):
            texts = [
                tokenizer.decode(cut_at_stop(ro.sampled_tokens(b), stop))
                for b in range(g * n, (g + 1) * n)
            ]
            out.append([(t, task.verify(p, t).reason == CORRECT) for t in texts])
    return distributed.gather_shards(mine, out, len(problems))


def _load_teacher(c, base):
    t = c.data.teacher
    if t.source == "warm_start":
        ws = warmstart.load_warm_start(t.domain or base.domain, t.role)
        return ws.model, ws.tokenizer
    if execution.has_execution(c):  # the teacher runs on the stage's mesh, in its dtypes
        return execution.load_policy(c, t.path)[0], warmstart.load_model_tokenizer(t.path)
    return load_pretrained(t.path)[0], warmstart.load_model_tokenizer(t.path)


def build_examples(c, model, tokenizer, task, base) -> tuple[list[tuple[str, str]], dict]:
    """The (prompt, completion) pairs of an SFT run config, and their counts."""
    d = c.data
    problems = task.problems(d.num_problems, d.split, start=d.start)
    stats: dict[str, Any] = {"problems": len(problems)}
    kw = dict(
        temperature=d.temperature,
        max_new_tokens=d.max_new_tokens,
        prompts_per_call=d.sample_prompts,
    )
    if d.filter == "all_wrong":
        own = sample_verified(
            model, tokenizer, task, problems, n=d.filter_samples, seed=c.seed, **kw
        )
        problems = [p for p, s in zip(problems, own, strict=True) if not any(ok for _, ok in s)]
        stats["all_wrong_problems"] = len(problems)
    if d.source == "reference":
        examples = [(p.prompt, p.solution) for p in problems]
    else:
        teacher, teacher_tok = _load_teacher(c, base)
        got = sample_verified(
            teacher, teacher_tok, task, problems, n=d.teacher_samples, seed=c.seed + 1, **kw
        )
        examples = [(p.prompt, t) for p, s in zip(problems, got, strict=True) for t, ok in s if ok]
        stats["teacher_samples"] = len(problems) * d.teacher_samples
        stats["teacher_solved_problems"] = sum(any(ok for _, ok in s) for s in got)
    stats["examples"] = len(examples)
    return examples, stats


def _cached_examples(ctx: StageContext, model, tokenizer, task):
    path, stats_path = ctx.workdir / DATA_FILE, ctx.workdir / STATS_FILE
    if distributed.everyone(stats_path.is_file()):
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [(r["prompt"], r["completion"]) for r in rows], json.loads(stats_path.read_text())
    examples, stats = build_examples(ctx.config, model, tokenizer, task, ctx.base)
    if not distributed.is_logging_process():
        return examples, stats
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"prompt": p, "completion": s}) + "\n" for p, s in examples)
    _write_atomic(path, text)
    _write_atomic(stats_path, json.dumps(stats, indent=2))  # last: marks the data complete
    log.info("sft stage %s: %s", ctx.name, stats)
    return examples, stats


def _write_atomic(path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# ------------------------------------------------------------------------ training
class _Position:
    """The SFT 'iterator' RunIO checkpoints: batches are a function of (seed, step)."""

    def get_state(self) -> dict:
        return {"sft": "batches from (seed, step)"}

    def set_state(self, state: dict) -> None:
        del state


def batch_order(num_examples: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """[steps, batch_size] example indices: seeded epochs of permutations."""
    rng = np.random.default_rng([seed, num_examples])
    need = steps * batch_size
    perms = [rng.permutation(num_examples) for _ in range(-(-need // num_examples))]
    return np.concatenate(perms)[:need].reshape(steps, batch_size)


def _evaluate(c, model, tokenizer, task) -> dict[str, float]:
    e = c.eval
    res = evaluate_task(
        model,
        tokenizer,
        task,
        split=e.split,
        num_problems=e.num_problems,
        n_samples=e.n_samples,
        temperature=e.temperature,
        max_new_tokens=c.data.max_new_tokens,
        seed=c.seed + 2,
        split_processes=True,
    )
    out = {k: v for k, v in res.items() if k.startswith("pass@")}
    out.update(mean_reward=res["mean_reward"], mean_response_tokens=res["mean_response_tokens"])
    return out


def run_sft(ctx: StageContext) -> dict[str, Any]:
    """Runs (or resumes) an SFT stage; returns its final evaluation and data counts."""
    c = ctx.config
    model, mesh, rules = execution.load_policy(c, ctx.init_dir)
    tokenizer = load_model_tokenizer(ctx.init_dir)
    task = tasks.get(c.task.name, **json.loads(c.task.options or "{}"))
    io = RunIO(ctx.workdir, c, allow_config_change=ctx.allow_config_change)
    try:
        examples, stats = _cached_examples(ctx, model, tokenizer, task)
        steps = c.train.steps if examples else 0
        if not examples:
            log.warning("sft stage %s has no examples: its export is its start", ctx.name)
        step, preempted = _train(ctx, io, model, tokenizer, task, examples, steps, mesh, rules)
        if preempted:
            return {"preempted": True, "step": step}
        final = _evaluate(c, model, tokenizer, task)
        io.log_eval(steps, final)
        io.finish(model, tokenizer)
        return dict(final, steps=steps, **{f"data_{k}": v for k, v in stats.items()})
    finally:
        io.close()


def _train(ctx, io, model, tokenizer, task, examples, steps, mesh, rules) -> tuple[int, bool]:
    """The SFT loop from the last checkpoint; leaves the trained params in `model`.

    With a `mesh` the state is sharded on it by `rules`; each batch is replicated
    (`stage_kind.spread`'s mesh) or, with the execution blocks, split by rows over data x fsdp.

    Returns:
      (the last step trained, whether a signal stopped it there).
    """
    c = ctx.config
    encoded = [sft.encode_example(tokenizer, p, s) for p, s in examples]
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = sft.make_optimizer(
        c.train.lr, max(steps, 1), end_lr_fraction=c.train.end_lr_fraction
    )
    rows = execution.has_execution(c)
    step_fn = sft.make_train_step(graphdef, optimizer, mesh=mesh if rows else None, rules=rules)
    state = sft.TrainState(
        jax.tree.map(jnp.copy, params), optimizer.init(params), jnp.zeros((), jnp.int32)
    )
    if mesh is not None:
        state = sharding.shard_state(state, mesh, rules)
        batch_sharding = (sharding.batch_sharding if rows else sharding.replicated)(mesh)
    position = _Position()
    state, start = io.restore(state, position)
    if not steps:
        return 0, False
    longest = max(len(ids) for ids, _ in encoded)
    length = -(-longest // 8) * 8
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    order = batch_order(len(encoded), c.train.batch_size, steps, c.seed)
    with io.preemption() as guard:
        for i in range(start, steps):
            batch = sft.pad_batch([encoded[j] for j in order[i]], length, pad)
            if mesh is not None:
                batch = jax.device_put(batch, batch_sharding)
            state, metrics = step_fn(state, rest, batch)
            m = {k: float(v) for k, v in jax.device_get(metrics).items()}
            if not math.isfinite(m["loss"]):
                raise FloatingPointError(
                    f"SFT loss is {m['loss']} at step {i + 1}; stopping. " + io.resume_hint()
                )
            step = i + 1
            # Before anything of this step can be saved: parameters and grad norm sane.
            io.guard.check(
                {"policy": state.params}, m, step=step, update=0, last_good=io.latest_step()
            )
            io.log_train(step, steps, {k: m[k] for k in ("loss", "grad_norm", "num_tokens")})
            if c.eval.every and step % c.eval.every == 0 and step < steps:
                nnx.update(model, jax.tree.map(jnp.copy, state.params))
                io.log_eval(step, _evaluate(c, model, tokenizer, task))
            stop = distributed.agree(guard.requested)  # a signal may reach only some hosts
            if step % c.checkpoint.every == 0 or step == steps or stop:
                io.save(step, state, position, m)
            if stop:
                return step, True
    nnx.update(model, state.params)
    return steps, False
