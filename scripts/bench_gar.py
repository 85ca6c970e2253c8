"""GAR cost: wall-clock of the GAR reward vs one plain GRPO update, same model and batch.

Usage:
  taskset -c 1 python scripts/bench_gar.py                  # 3M bench model, 64 rows x 128 tokens
  python scripts/bench_gar.py --size 30m --rows 32 --repeats 5

GRPO update: `rlvr_jax.rl.update.make_update` with the PPO-clip loss on one
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
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.core import gar as gar_lib
from rlvr_jax.models.transformer import init_model
from rlvr_jax.rl import objectives
from rlvr_jax.rl.methods import gar_signal as gs
from rlvr_jax.rl.update import RLState, build_optimizer, make_update
from rlvr_jax.testing import bench_config


def _timed(fn) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="3m", choices=["3m", "30m"])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--group_size", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
