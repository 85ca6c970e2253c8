"""GAR cost: its share of a whole RL step (the paper's measure), and its parts vs one update.

Usage (pin to one core; every number is then per core):
  taskset -c 1 python scripts/bench_gar.py step                 # experiments/gar/gar.py, 8 steps
  taskset -c 1 python scripts/bench_gar.py step --set score.gar.aux_anchors=0
  taskset -c 1 python scripts/bench_gar.py update               # 3M bench model, 64 x 128 tokens
  python scripts/bench_gar.py update --size 30m --rows 32 --repeats 5

step: `--steps` RL steps of the GAR experiment through the trainer (sampling,
verification, the GAR signal, credit, the PPO update), as the paper measures
(wall-clock share of a whole step, generation included). Per step: the step's
seconds, its rollout seconds, the GAR signal's seconds (its forward pass over the
rollouts, which also yields the trainer's old log-probs, the anchors' forward
passes and the output-projection kernel), and, timed after the run on the same
rows, the trainer's own old-log-prob forward. Each is clocked in wall seconds and
in process CPU seconds (the robust measure on a shared machine, where wall
time includes waiting for a core). Reported (medians over steps 2..N; step 1
compiles): GAR's extra time in a step that recomputes old log-probs as verl /
slime do (signal − that forward), as a share of the whole step and as overhead
over the step without GAR; and GAR with its own forward over a step that takes
the sampler's log-probs.

update: GRPO update: `rlvr_jax.rl.update.make_update` with the PPO-clip loss on one
micro-batch (forward + backward + AdamW). GAR reward: one forward pass (hidden
states only) over the rollouts and over one expert anchor per group, the
chunked output-projection signatures, max-cosine alignment and the group-centred
dense reward (`rlvr_jax.rl.methods.gar_signal`). Also timed: the GAR
kernel alone given the hidden states (what GAR adds when the score stage reuses
the hidden states of a forward pass it runs anyway). Each is jitted, warmed up,
then timed `--repeats` times alternately; medians are printed (paper: < 9%
overhead, relative to its whole step including generation; ours is relative
to the update alone, the stricter ratio).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import resource
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import pyfile
from rlvr_jax.core import gar as gar_lib
from rlvr_jax.models.transformer import init_model
from rlvr_jax.rl import objectives, signals
from rlvr_jax.rl import trainer as trainer_lib
from rlvr_jax.rl.methods import gar_signal as gs
from rlvr_jax.rl.update import RLState, build_optimizer, make_update
from rlvr_jax.testing import bench_config


def _timed(fn) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    st = sub.add_parser("step", help="GAR's share of whole RL steps through the trainer")
    st.add_argument("--config", default="experiments/gar/gar.py")
    st.add_argument("--steps", type=int, default=8)
    st.add_argument("--workdir", default="")
    st.add_argument("--set", action="append", default=[], help="config field=value override")
    up = sub.add_parser("update", help="GAR's reward and kernel vs one GRPO update")
    _update_args(up)
    a = ap.parse_args()
    if a.mode == "step":
        _step_bench(a)
    else:
        _update_bench(a)


def _update_args(ap):
    ap.add_argument("--size", default="3m", choices=["3m", "30m"])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--group_size", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)


def _update_bench(a):
    cfg = bench_config(a.size)
    graphdef, params, rest = nnx.split(init_model(cfg, seed=0), nnx.Param, ...)
    rng = np.random.default_rng(0)
    b, t, g = a.rows, a.length, a.rows // a.group_size
    tokens = rng.integers(3, cfg.vocab_size, (b, t)).astype(np.int32)
    attn = np.ones((b, t), bool)
    mask = np.zeros((b, t), bool)
    mask[:, a.prompt :] = True
    mb = {
        "tokens_BxT": tokens,
        "attention_mask_BxT": attn,
        "mask_BxT": mask,
        "old_logps_BxT": np.where(mask, rng.normal(-6, 0.3, (b, t)), 0).astype(np.float32),
        "adv_BxT": np.where(mask, rng.normal(size=(b, 1)), 0).astype(np.float32),
    }
    mb = {k: jnp.asarray(v)[None] for k, v in mb.items()}  # one micro-batch
    spec = objectives.LossSpec(
        "ppo_clip", (("dual_clip", 0.0), ("eps_high", 0.2), ("eps_low", 0.2))
    )
    opt = build_optimizer(1e-5, 1000)
    update = make_update(graphdef, opt, spec)
    state = RLState(
        params, opt.init(params), None, None, jnp.zeros((), jnp.int32), jax.random.PRNGKey(0)
    )

    anchor_tokens = rng.integers(3, cfg.vocab_size, (g, t)).astype(np.int32)
    group = np.repeat(np.arange(g), a.group_size).astype(np.int32)
    correct = rng.random(b) < 0.5

    @jax.jit
    def gar_reward(params, rest, tokens, attn, mask, anchor_tokens, group, correct):
        model = nnx.merge(graphdef, params, rest)
        sig = gs.gar_signatures_from_model(model, tokens, attn, mask, chunk=a.chunk)
        a_sig = gs.gar_signatures_from_model(
            model,
            anchor_tokens,
            attn[: len(anchor_tokens)],
            mask[: len(anchor_tokens)],
            chunk=a.chunk,
        )
        anchors = a_sig[:, None]
        return gs.gar_rewards_from_signatures(
            sig, anchors, jnp.ones(anchors.shape[:2], bool), group, correct
        )[0]

    @jax.jit
    def hidden(params, rest, tokens, attn):
        model = nnx.merge(graphdef, params, rest)
        return model.forward(tokens, attn, return_hidden=True, logits="none").hidden

    @jax.jit
    def gar_kernel(params, rest, h, tokens, mask, anchor_h, anchor_tokens, group, correct):
        # The reward given hidden states (a score stage that reuses another forward pass).
        w = gs.output_projection_VxD(nnx.merge(graphdef, params, rest))
        sig = gar_lib.gar_signatures(h[:, :-1], w, tokens[:, 1:], mask[:, 1:], chunk=a.chunk)
        m_a = mask[: len(anchor_tokens), 1:]
        a_sig = gar_lib.gar_signatures(
            anchor_h[:, :-1], w, anchor_tokens[:, 1:], m_a, chunk=a.chunk
        )
        anchors = a_sig[:, None]
        return gs.gar_rewards_from_signatures(
            sig, anchors, jnp.ones(anchors.shape[:2], bool), group, correct
        )[0]

    gar_args = (tokens, attn, mask, anchor_tokens, group, correct)
    h = hidden(params, rest, tokens, attn)
    anchor_h = hidden(params, rest, anchor_tokens, attn[:g])
    kernel_args = (h, tokens, mask, anchor_h, anchor_tokens, group, correct)
    holder = {"state": state}

    def run_update():
        holder["state"], metrics = update(holder["state"], rest, None, mb)
        return metrics["loss"]

    runs = {
        "grpo_update": run_update,
        "gar_reward": lambda: gar_reward(holder["state"].params, rest, *gar_args),
        "gar_kernel": lambda: gar_kernel(holder["state"].params, rest, *kernel_args),
    }
    for _ in range(2):  # compile + warm-up
        for fn in runs.values():
            _timed(fn)
    times = {k: [] for k in runs}
    for _ in range(a.repeats):  # interleaved, so drift hits all equally
        for k, fn in runs.items():
            times[k].append(_timed(fn))
    upd, gar, ker = (statistics.median(times[k]) for k in runs)
    print(
        f"bench_gar: model={a.size} ({cfg.num_params() / 1e6:.1f}M, V={cfg.vocab_size}) "
        f"rows={b} length={t} groups={g} chunk={a.chunk} repeats={a.repeats} | "
        f"grpo_update {upd * 1e3:.1f} ms | gar_reward {gar * 1e3:.1f} ms "
        f"(overhead {gar / upd:.1%}) | gar_kernel_given_hidden {ker * 1e3:.1f} ms "
        f"(overhead {ker / upd:.1%})"
    )


def _clock(rec, name, fn):
    """fn wrapped to append its (wall, process CPU) seconds to rec[name] on every call."""

    def run(*args, **kwargs):
        w, c = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(fn(*args, **kwargs))
        rec.setdefault(name, []).append((time.perf_counter() - w, time.process_time() - c))
        return out

    return run


def _step_bench(a):
    """Runs the GAR experiment through the trainer and clocks each stage of its steps."""
    path, _, variant = a.config.partition(":")
    module = pyfile.load(path, "gar_config")
    c = module.get_config(variant)
    c.train.steps = a.steps
    c.eval.at_start = False
    c.eval.every = 0
    c.eval.num_problems, c.eval.n_samples = 2, 1  # the run's closing eval: kept small
    c.checkpoint.every = a.steps
    c.checkpoint.export_final = False
    for item in a.set:  # --set score.gar.aux_anchors=0
        key, _, value = item.partition("=")
        section, field = key.rsplit(".", 1)
        node = c
        for part in section.split("."):
            node = node[part]
        node[field] = ast.literal_eval(value)
    if signals.signal_names(c) != ["gar"]:
        raise ValueError(f"{a.config}: score.signals must be 'gar', got {c.score.signals!r}")
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench_gar_")
    rec, rows = {}, []
    original_compute = signals.compute
    stages = ("_sync_model", "rollout", "score", "credit", "update")
    originals = {m: getattr(trainer_lib.Trainer, m) for m in stages}

    def compute(ctx, groups, batch, names, options):
        rows.append((batch["tokens_BxT"], batch["attention_mask_BxT"]))
        return original_compute(ctx, groups, batch, names, options)

    signals.compute = _clock(rec, "gar", compute)
    for m in stages:  # each stage of the trainer's step; _sync_model: weights to the sampler
        name = "sync" if m == "_sync_model" else m
        setattr(trainer_lib.Trainer, m, _clock(rec, name, originals[m]))
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    trainer = trainer_lib.Trainer.from_config(c, workdir)
    try:
        trainer.run()
    finally:
        trainer.io.close()
        signals.compute = original_compute
        for m in stages:
            setattr(trainer_lib.Trainer, m, originals[m])
    wall = time.perf_counter() - t0
    # The trainer's old-log-prob forward (loss.recompute_old_logps) on the same rows.
    policy = trainer.parts.score_ctx.with_policy(params=trainer.state.params).policy
    for tokens, attn in rows:
        run = functools.partial(policy.logps, tokens, attn)
        run()  # compile / warm
        _clock(rec, "forward", run)()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    parts = ("sync", "rollout", "score", "credit", "update", "gar", "forward")
    n = len(rec["rollout"])
    rec["sync"] = rec["sync"][:n]  # the closing evaluation syncs once more
    for k in ("wall", "cpu"):
        col = 0 if k == "wall" else 1
        # Medians over steps 2..N (step 1 compiles); a step = sync (weights to the sampler)
        # + rollout + score (GAR inside) + credit + update.
        per = {p: statistics.median(x[col] for x in rec[p][1:]) for p in parts}
        step = statistics.median(sum(rec[p][i][col] for p in parts[:5]) for i in range(1, n))
        extra = per["gar"] - per["forward"]
        print(
            f"bench_gar step [{k} s]: config={a.config} steps={a.steps} rows={len(rows[0][0])} "
            f"(B={c.data.prompts_per_step} x G={c.data.group_size}) "
            f"L_max={c.rollout.max_new_tokens} | medians over steps 2..{n}: step {step:.2f}, "
            + ", ".join(f"{p} {per[p]:.2f}" for p in parts)
            + f" | GAR minus the forward it shares: {extra:.2f} = {extra / step:.1%} of the "
            f"step, overhead {extra / (step - extra):.1%} over a step that recomputes old "
            f"log-probs | GAR with its own forward: {per['gar'] / step:.1%} of the step, "
            f"overhead {per['gar'] / (step - per['gar']):.1%} over a step on the sampler's "
            "log-probs"
        )
    with open(f"{workdir}/bench_gar_step.json", "w") as f:  # every step's clocks
        json.dump({p: rec[p] for p in parts}, f)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    print(f"bench_gar step: wall {wall:.0f} s, CPU {cpu:.0f} s (whole run, compiles included)")


if __name__ == "__main__":
    main()
