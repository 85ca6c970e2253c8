"""GAR (Gradient-Aligned Reward) as a score signal: signatures of rollouts and anchors, rewards.

GAR replaces the sequence reward before the advantage estimator, so it is a
score-stage signal, not a credit transform: the score signal "gar"
(`config.score.signals = "gar"`) runs `gar_signatures_from_model` on the
rollouts, on each prompt's expert solution (`Problem.solution`) and on its
auxiliary anchors (`Task.alternative_solutions`), then
`gar_rewards_from_signatures` (kernels in `rlvr_jax.core.gar`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.core import gar as gar_lib
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import signals
from rlvr_jax.tokenizers import encode_prompt, end_of_turn_id


def output_projection_VxD(model):
    """The model's output projection as [V, D] rows (tied: the embedding itself), float32."""
    if model.lm_head is None:
        return model.embed_tokens[...].astype(jnp.float32)
    return model.lm_head[...].T.astype(jnp.float32)


def gar_signatures_from_model(
    model,
    tokens_BxT,
    attention_mask_BxT,
    mask_BxT,
    *,
    variant="grad_hidden",
    chunk=1024,
    with_logps=False,
):
    """GAR signatures S_i of full sequences (prompt + response) under `model`.

    One forward pass for the final hidden states, then `core.gar.gar_signatures`
    over the response tokens: hidden state t predicts token t + 1, so token t of
    `mask_BxT` pairs with hidden state t − 1. With `with_logps` that pass is the
    trainer's own scoring forward (`models.scoring.token_logps` returning its
    hidden states): GAR then costs no forward pass of its own in a step that
    needs the trainer's old log-probs. No gradient flows (rewards are data).

    Args:
      model: a `rlvr_jax.models.transformer.Transformer`.
      tokens_BxT: int ids, context and response in one row (any padding).
      attention_mask_BxT: 1 at real tokens.
      mask_BxT: bool/{0,1}, the response tokens whose cross-entropy counts
        (for an expert anchor: the solution tokens).
      variant: "grad_hidden" or "grad" (`core.gar.VARIANTS`).
      chunk: vocabulary chunk size.
      with_logps: static; also return logps_BxT.
    Returns:
      sig_BxD float32 unit vectors (0 for rows without a response token), and
      with `with_logps` the pair (sig_BxD, logps_BxT).
    """
    if with_logps:
        # Entry t of the scorer's hidden states predicts token t (entry 0 is zeros).
        logps, hidden = token_logps(model, tokens_BxT, attention_mask_BxT, return_hidden=True)
        hidden = hidden[:, 1:]
    else:
        out = model.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
        hidden = out.hidden[:, :-1]
    attn = jnp.asarray(attention_mask_BxT) != 0
    mask = (jnp.asarray(mask_BxT) != 0) & attn
    sig = gar_lib.gar_signatures(
        hidden,
        output_projection_VxD(model),
        tokens_BxT[:, 1:],
        mask[:, 1:],
        variant=variant,
        chunk=chunk,
    )
    if not with_logps:
        return jax.lax.stop_gradient(sig)
    return jax.lax.stop_gradient((sig, logps))


def gar_rewards_from_signatures(
    sig_BxD,
    anchor_sig_GxKxD,
    anchor_valid_GxK,
    group_B,
    correct_B,
    *,
    beta=0.5,
    min_group=2,
    valid_B=None,
    aux_sig_GxJxD=None,
    aux_valid_GxJ=None,
    aux_weight=0.5,
    aux_combine="aux_residual",
):
    """GAR dense rewards of a batch from rollout and per-group anchor signatures.

    Args:
      sig_BxD: rollout signatures (`gar_signatures_from_model`).
      anchor_sig_GxKxD: K expert-anchor signatures per group (G = num_groups, static).
      anchor_valid_GxK: bool, which anchors exist.
      group_B: int32 group ids in [0, G).
      correct_B: bool verdicts.
      beta: β.
      min_group: passing rows a group needs to be centred (`core.gar.gar_rewards`).
      valid_B: optional bool real rows.
      aux_sig_GxJxD, aux_valid_GxJ, aux_weight, aux_combine: optional auxiliary
        anchors (see `core.gar.anchor_alignment`).
    Returns:
      (rewards_B, align_B): float32 GAR rewards and each row's alignment.
    """
    group_B = jnp.asarray(group_B, jnp.int32)
    aux = {}
    if aux_sig_GxJxD is not None:
        aux = dict(
            aux_BxJxD=jnp.asarray(aux_sig_GxJxD)[group_B],
            aux_mask_BxJ=jnp.asarray(aux_valid_GxJ)[group_B],
            aux_weight=aux_weight,
            aux_combine=aux_combine,
        )
    align_B, has_B = gar_lib.anchor_alignment(
        sig_BxD,
        jnp.asarray(anchor_sig_GxKxD)[group_B],
        jnp.asarray(anchor_valid_GxK)[group_B],
        **aux,
    )
    num_groups = anchor_sig_GxKxD.shape[0]
    rewards_B = gar_lib.gar_rewards(
        align_B,
        correct_B,
        group_B,
        num_groups,
        beta=beta,
        min_group=min_group,
        has_anchor_B=has_B,
        valid_B=valid_B,
    )
    return rewards_B, align_B


# Anchor rows are padded to a multiple of this: few distinct shapes, few compiles.
_ANCHOR_MULTIPLE = 32


def anchor_rows(tokenizer, problems, *, pad_id: int = 0, multiple: int = _ANCHOR_MULTIPLE):
    """Prompt + expert-solution rows of `problems` in the sampler layout, for GAR anchors.

    Each row is the chat-rendered prompt, left-padded to the longest prompt,
    then the solution tokens and the end-of-turn token (what a rollout samples),
    right-padded; both parts are padded to a multiple of `multiple` columns.

    Args:
      tokenizer: the policy's tokenizer.
      problems: P task Problems; an empty `solution` gives a row without response tokens.
      pad_id: id written at padding positions.
      multiple: column rounding of the prompt and solution parts.
    Returns:
      (tokens_PxS int32, attention_mask_PxS bool, mask_PxS bool, has_P bool): `mask`
      is True on the solution tokens; `has_P` says which problems have a solution.
    """
    eot = end_of_turn_id(tokenizer)
    prompts = [encode_prompt(tokenizer, p.prompt) for p in problems]
    sols = [tokenizer.encode(p.solution) + [eot] if p.solution else [] for p in problems]
    up = lambda n: max(-(-n // multiple) * multiple, multiple)
    lp, ls = up(max(map(len, prompts))), up(max(map(len, sols)))
    tokens = np.full((len(problems), lp + ls), pad_id, np.int32)
    attn = np.zeros(tokens.shape, bool)
    mask = np.zeros(tokens.shape, bool)
    for i, (pr, so) in enumerate(zip(prompts, sols, strict=True)):
        tokens[i, lp - len(pr) : lp] = pr
        tokens[i, lp : lp + len(so)] = so
        attn[i, lp - len(pr) : lp + len(so)] = True
        mask[i, lp : lp + len(so)] = True
    return tokens, attn, mask, np.array([bool(s) for s in sols])


def aux_problems(task, problems, k: int):
    """P·k problems: each prompt with up to k of `task.alternative_solutions` ("" pads).

    Returns:
      (problems of length P·k, row-major [P, k]; has_PxK bool, which exist).
    """
    alts = [task.alternative_solutions(p, k) for p in problems]
    flat = [
        dataclasses.replace(p, solution=a[j] if j < len(a) else "")
        for p, a in zip(problems, alts, strict=True)
        for j in range(k)
    ]
    has = np.array([[j < len(a) for j in range(k)] for a in alts], bool).reshape(len(problems), k)
    return flat, has


def _signature_fn(ctx, variant: str, chunk: int, with_logps: bool):
    """Jitted (params, rest, tokens, attn, mask) -> sig_BxD [, logps_BxT], built once per run."""
    key = ("gar/signature_fn", variant, int(chunk), with_logps)
    if key not in ctx.cache:
        graphdef = ctx.policy.graphdef  # the layout of the policy's params / rest

        def fn(params, rest, tokens_BxT, attention_mask_BxT, mask_BxT):
            model = nnx.merge(graphdef, params, rest)
            return gar_signatures_from_model(
                model,
                tokens_BxT,
                attention_mask_BxT,
                mask_BxT,
                variant=variant,
                chunk=chunk,
                with_logps=with_logps,
            )

        # Traced under the run's mesh rules, like the policy's scorer (params stay sharded).
        ctx.cache[key] = jax.jit(sharding.with_rules(fn, ctx.mesh, ctx.rules))
    return ctx.cache[key]


def _anchor_signatures(ctx, fn, fixed, problems, rows):
    """Signatures [N, D] of the anchor rows of `problems` (0 where a problem has no solution)."""
    tok, attn, mask, has = anchor_rows(ctx.tokenizer, problems, pad_id=ctx.pad_id)
    idx = np.flatnonzero(has)
    out = np.zeros((len(problems), ctx.policy.config.hidden_size), np.float32)
    if idx.size:  # only the rows that have a solution run through the model
        out[idx] = signals.map_row_chunks(fn, fixed, (tok[idx], attn[idx], mask[idx]), chunk=rows)
    return out, has


@signals.register(
    "gar",
    provides=("rewards_B", "old_logps_BxT"),
    variant="grad_hidden",
    beta=0.5,
    min_group=2,
    aux_anchors=4,
    aux_combine="aux_residual",
    aux_weight=0.5,
    chunk=1024,
)
def gar_signal(
    ctx, groups, batch, *, variant, beta, min_group, aux_anchors, aux_combine, aux_weight, chunk
):
    """GAR rewards: passing rollouts get β·max(0, a_i − m_g) added; others keep their reward.

    Signatures of the rollouts (their sampled response tokens), of each
    prompt's expert solution (`anchor_rows`) and of up to `aux_anchors` of its
    other solutions (`Task.alternative_solutions`, the auxiliary anchors) under
    the *current* policy (`ctx.policy.params`, recomputed every step: GAR measures
    alignment in the policy's own gradient space, which moves as it trains).
    With the verifier's 0/1 reward this is exactly `core.gar.gar_rewards`
    (1 + β·bonus or 0); ours: shaped rewards (overlong penalties, partial
    credit) are kept and the GAR bonus is added on passing rows, so failing rows
    keep their reward. A problem without a solution gives its group no anchor.

    The rollouts' forward pass is also the step's old-log-prob forward: the
    signal returns the trainer's log-probs of the sampled tokens as
    "old_logps_BxT" (what `loss.recompute_old_logps` computes), so GAR adds only
    its output-projection kernel and the anchors' forward to a step that
    recomputes them (leave `loss.recompute_old_logps` False: it would run the
    same forward once more).

    Options (config.score.gar.*): variant ("grad_hidden" | "grad"), beta (β),
    min_group (passing rows a group needs to be centred; reference 2),
    aux_anchors (auxiliary anchors per prompt, 0 = none; reference up to 4),
    aux_combine / aux_weight (`core.gar.anchor_alignment`; reference
    "aux_residual", 0.5), chunk (vocabulary chunk of the signature kernel).
    Returns:
      {"rewards_B": float32 [R], "old_logps_BxT": float32 [R, T]}.
    """
    for field, value, valid in (
        ("variant", variant, gar_lib.VARIANTS),
        ("aux_combine", aux_combine, gar_lib.AUX_COMBINES),
    ):
        if value not in valid:
            raise ValueError(f"config.score.gar.{field} = {value!r}; valid: {', '.join(valid)}")
    if min_group < 1 or aux_anchors < 0:
        raise ValueError(
            f"config.score.gar: min_group = {min_group} must be >= 1 and aux_anchors = "
            f"{aux_anchors} >= 0"
        )
    fn = _signature_fn(ctx, variant, chunk, with_logps=True)
    fixed, rows = (ctx.policy.params, ctx.policy.rest), ctx.chunk
    resp = groups.response_mask & groups.attention_mask
    sig_BxD, logps_BxT = signals.map_row_chunks(
        fn, fixed, (groups.tokens, groups.attention_mask, resp), chunk=rows
    )
    sig_only = _signature_fn(ctx, variant, chunk, with_logps=False)
    anchor_PxD, has_P = _anchor_signatures(ctx, sig_only, fixed, groups.problems, rows)
    aux = {}
    if aux_anchors > 0 and aux_combine != "real_only":
        flat, has_PxK = aux_problems(ctx.task, groups.problems, aux_anchors)
        if has_PxK.any():
            aux_sig, _ = _anchor_signatures(ctx, sig_only, fixed, flat, rows)
            aux = dict(
                aux_sig_GxJxD=aux_sig.reshape(has_PxK.shape + aux_sig.shape[1:]),
                aux_valid_GxJ=has_PxK,
                aux_weight=aux_weight,
                aux_combine=aux_combine,
            )
    gar_B, _ = gar_rewards_from_signatures(
        sig_BxD,
        anchor_PxD[:, None],
        has_P[:, None],
        batch["group_B"],
        batch["correct_B"],
        beta=beta,
        min_group=min_group,
        valid_B=batch["valid_B"],
        **aux,
    )
    rewards = np.asarray(batch["rewards_B"], np.float32)
    passed = np.asarray(batch["correct_B"], bool) & np.asarray(batch["valid_B"], bool)
    return {
        "rewards_B": np.where(passed, rewards + np.asarray(gar_B) - 1.0, rewards),
        "old_logps_BxT": np.where(batch["mask_BxT"], logps_BxT, 0.0).astype(np.float32),
    }
