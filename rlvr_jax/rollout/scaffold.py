"""LSPO's rollout (`rollout.name = "lora_scaffold"`): adapter re-rolls of the all-fail groups.

Paper-fixed (abstract): each step, detect the cliff prompts (every rollout of
the group failed), fit a small LoRA adapter by a brief supervised step on their
reference solutions, re-roll them with base + adapter, splice the successful
completions into their groups with an importance correction, and take the GRPO
step on the base alone; the adapter gets only the supervised gradient and is
discarded (the "lspo" loss: the sequence weight clip(π_base / π_adapter)).

Here: the plain rollout first (same draws as "plain"); then, if some group is
all-wrong by the verifier and its problem has a reference solution, a fresh
adapter (`models.lora`, rank / alpha, on every projection) is fitted with
`steps` Adam steps (lr) on those problems' solutions (the SFT loss of their
chat-rendered prompt + solution), `rerolls` rows per cliff problem are sampled
with base + adapter, and up to `max_splice` correct re-rolls replace the
group's first rows, keeping μ = the adapter's log-probs (`behaviour_logps`);
the trainer recomputes π_old = π_base (`loss.recompute_old_logps = True`,
required by `validate`). The adapted copy of the policy lives in the run's
rollout cache only for its compiled programs; its adapter is re-initialised
every step and its weights never reach the trainer's state. Ours: rank 8,
alpha 16, 8 steps at lr 1e-3, rerolls = G, max_splice = G/2 (so a rescued
group stays mixed). Rows report `cliff_B` and `scaffold_B` (spliced); the
trainer logs `rollout/cliff_groups` and `rollout/scaffold_groups` (rescued).
Every re-roll is reported as generated off the batch (`Groups.off_batch`), so the
step's `select/rollouts` and `select/tokens` count it (the budget of a comparison).
Multi-process: which groups are cliffs differs per host, and fitting and
sampling are collectives over the policy's mesh, so every process fits the same
adapter (the same seed, on the cliff problems of all processes, gathered in
process order, its parameters replicated on the mesh) and a process without
cliffs joins the re-roll sampler call with one filler row it drops.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.models import lora
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.registry import in_range
from rlvr_jax.rollout.base import ROLLOUTS, Request, RolloutContext, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.rollout.plain import plain
from rlvr_jax.sampling import Sampler
from rlvr_jax.tokenizers import encode_prompt, end_of_turn_id

_WIDTH_MULTIPLE = 32


@dataclasses.dataclass
class Scaffold:
    """A copy of the policy with adapters, its sampler and its jitted SFT step (per run)."""

    model: nnx.Module
    sampler: Sampler
    step: object
    rank: int
    alpha: float


def _scaffold(ctx: RolloutContext, rank: int, alpha: float) -> Scaffold:
    key = ("lora_scaffold", rank, float(alpha))
    if key not in ctx.cache:
        model = nnx.merge(*nnx.split(ctx.sampler.model))  # a copy of the policy's module tree
        lora.add_lora(model, rank=rank, alpha=alpha, rngs=nnx.Rngs(0))
        graphdef = lora.split_lora(model)[0]

        @jax.jit
        def step(lora_params, opt_state, rest, tokens, attn, mask, lr):
            def loss_fn(lo):
                lp = token_logps(nnx.merge(graphdef, lo, rest), tokens, attn)
                m = mask.astype(jnp.float32)
                return -(lp * m).sum() / jnp.maximum(m.sum(), 1.0)

            loss, grads = jax.value_and_grad(loss_fn)(lora_params)
            updates, opt_state = optax.adam(lr).update(grads, opt_state, lora_params)
            return optax.apply_updates(lora_params, updates), opt_state, loss

        sampler = ctx.sampler.with_model(model)  # the trainer's cache budget and dtype
        ctx.cache[key] = Scaffold(model, sampler, step, rank, float(alpha))
    return ctx.cache[key]


def sft_rows(tokenizer, pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, attention, loss mask) [P, W]: each chat-rendered prompt + solution + end of turn.

    Args:
      pairs: (prompt, solution) texts.
    """
    eot = end_of_turn_id(tokenizer)
    seqs = [
        (encode_prompt(tokenizer, prompt), tokenizer.encode(solution) + [eot])
        for prompt, solution in pairs
    ]
    width = max(len(a) + len(b) for a, b in seqs)
    width = -(-width // _WIDTH_MULTIPLE) * _WIDTH_MULTIPLE
    tokens = np.zeros((len(seqs), width), np.int32)
    attn, mask = np.zeros(tokens.shape, bool), np.zeros(tokens.shape, bool)
    for i, (a, b) in enumerate(seqs):
        tokens[i, : len(a) + len(b)] = a + b
        attn[i, : len(a) + len(b)] = True
        mask[i, len(a) : len(a) + len(b)] = True
    return tokens, attn, mask


def fit_adapter(ctx, scaffold: Scaffold, pairs, *, steps: int, lr: float, seed: int) -> float:
    """A fresh adapter on the current policy, fitted to (prompt, solution) `pairs`; the last loss.

    On a mesh (the policy's sampler has one) the adapter and the SFT rows are
    replicated on it: every process must pass the same `pairs` and `seed`.
    """
    model = scaffold.model
    lora.remove_lora(model)
    nnx.update(model, ctx.policy_state)  # the base: the current policy's weights
    lora.add_lora(model, rank=scaffold.rank, alpha=scaffold.alpha, rngs=nnx.Rngs(seed))
    _, lora_params, rest = lora.split_lora(model)
    tokens, attn, mask = sft_rows(ctx.tokenizer, pairs)
    mesh = scaffold.sampler.mesh
    if mesh is not None:  # next to the sharded base weights, the same on every process
        lora_params, tokens, attn, mask = jax.device_put(
            (lora_params, tokens, attn, mask), sharding.replicated(mesh)
        )
    opt_state = optax.adam(lr).init(lora_params)
    loss = jnp.nan
    for _ in range(steps):
        lora_params, opt_state, loss = scaffold.step(
            lora_params, opt_state, rest, tokens, attn, mask, lr
        )
    nnx.update(model, lora_params)
    return float(loss)


def _check(c) -> None:
    r = c.rollout.lora_scaffold
    for field in ("rank", "steps"):
        in_range("rollout.lora_scaffold", r, field, 1, 1 << 16)
    in_range("rollout.lora_scaffold", r, "lr", 0.0, 1.0, lo_open=True)
    for field in ("rerolls", "max_splice"):
        in_range("rollout.lora_scaffold", r, field, 0, 1 << 16)


# μ (the scaffolded weights) differs from π_old on the rescued rows.
@ROLLOUTS.register(
    "lora_scaffold",
    check=_check,
    off_policy=True,
    rank=8,
    alpha=16.0,
    steps=8,
    lr=1e-3,
    rerolls=0,
    max_splice=0,
)
def lora_scaffold(ctx: RolloutContext, *, rank, alpha, steps, lr, rerolls, max_splice) -> Groups:
    """The plain rollout, with adapter re-rolls spliced into its all-fail groups.

    Options: rank, alpha (the adapter's R and scale α/R), steps and lr (its
    Adam SFT steps), rerolls (rows re-rolled per cliff problem; 0 = the group's
    size), max_splice (successes spliced per group; 0 = half the group).
    """
    req = ctx.request
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'lora_scaffold' cannot continue prefixes (PAIR)")
    groups = plain(ctx)
    n_groups = len(req.problems)
    cliff = np.array(
        [
            bool(req.problems[g].solution) and not groups.correct[groups.group == g].any()
            for g in range(n_groups)
        ]
    )
    spliced = np.zeros(len(groups.group), bool)
    targets = np.flatnonzero(cliff)
    # Every process fits one adapter on all processes' cliffs (collectives on the mesh).
    pairs = [(req.problems[g].prompt, req.problems[g].solution) for g in targets]
    pairs = [pair for part in distributed.allgather_objects(pairs) for pair in part]
    if pairs:
        scaffold = _scaffold(ctx, rank, alpha)
        seed = int(jax.random.randint(jax.random.fold_in(ctx.key, 1), (), 0, 2**30))
        fit_adapter(ctx, scaffold, pairs, steps=steps, lr=lr, seed=seed)
        n = rerolls or int(np.max(req.counts))
        key = jax.random.fold_in(ctx.key, 2)
        if not len(targets):  # join the other processes' re-roll call; the row is dropped
            filler = encode_prompt(ctx.tokenizer, req.problems[0].prompt)
            sub_ctx = dataclasses.replace(
                ctx, request=Request([req.problems[0]], np.ones(1, np.int64))
            )
            scaffold.sampler.sample([filler], sub_ctx.params(), key)
    if len(targets):
        sub = Request([req.problems[g] for g in targets], np.full(len(targets), n))
        sub_ctx = dataclasses.replace(ctx, request=sub, key=key)
        prompts = [encode_prompt(ctx.tokenizer, p.prompt) for p in sub.problems]
        ro = scaffold.sampler.sample(
            [prompts[c] for c in sub.group_R], sub_ctx.params(), sub_ctx.key
        )
        ro.group = sub.group_R
        rerolled = scored_groups(sub_ctx, ro)  # μ: the adapter's log-probs
        pairs = []
        for c, g in enumerate(targets):
            wins = np.flatnonzero((rerolled.group == c) & rerolled.correct)
            slots = np.flatnonzero(groups.group == g)
            k = min(len(wins), max_splice or len(slots) // 2)
            pairs += zip(slots[:k], wins[:k], strict=True)
            spliced[slots[:k]] = True
        # Every re-roll was generated for this step: the budget counts them, spliced or not
        # (the spliced ones replaced rows that were generated too).
        off = (len(rerolled.group), int(rerolled.lengths.sum()))
        groups = groups.replace_rows(pairs, rerolled, off)
    groups.info = {"cliff_B": cliff[groups.group], "scaffold_B": spliced}
    return groups
