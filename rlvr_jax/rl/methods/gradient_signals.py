"""Gradient-signal methods: GAPO clip bounds, CSCR credit reallocation, GAR model signatures.

Registered here:
  policy losses "gapo" (token PPO surrogate with GAPO's per-rollout clip
    bounds) and "gapo_gspo" (GSPO's sequence surrogate with them);
  credit transform "cscr", which reads the score stage's counterfactual
    log-prob shifts "cf_shift_correct_BxT" (Δ⁺_t = ℓ⁺_t − ℓ_t under a context
    asserting the answer is correct) and "cf_shift_incorrect_BxT" (Δ⁻_t).

GAR is a score-stage signal (it replaces the sequence reward before the
advantage estimator), so it is not a credit transform: the score signal "gar"
(`config.score.signals = "gar"`) calls `gar_signatures_from_model` on the
rollouts and on the prompts' expert solutions (`Problem.solution`), then
`gar_rewards_from_signatures`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import sharding
from rlvr_jax.core import cscr as cscr_lib
from rlvr_jax.core import gapo as gapo_lib
from rlvr_jax.core import gar as gar_lib
from rlvr_jax.rl import credit, objectives, signals
from rlvr_jax.tokenizers import encode_prompt, end_of_turn_id

# ------------------------------------------------------------------------------ GAPO


@objectives.POLICY_LOSSES.register(
    "gapo", eps_low=0.2, eps_high=0.2, eps_min=0.1, eps_max=0.5, ref_scale=0.0
)
def gapo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
):
    """GAPO token PPO: ε_i = clip(ε·|A_i|/Ā, ε_min, ε_max) per rollout (`core.gapo`).

    Ā is the mean |A_j| over the micro-batch's rows with A_j ≠ 0, unless
    ref_scale > 0 fixes it (then the bounds do not depend on the micro-batching;
    `gapo_batch_scale` gives the whole batch's Ā). Logs clip fractions and the
    mean bounds "eps_low" / "eps_high".
    """
    loss, stats = gapo_lib.gapo_ppo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    return loss, {k.removesuffix("_BxT"): v for k, v in stats.items()}


@objectives.POLICY_LOSSES.register(
    "gapo_gspo", eps_low=3e-4, eps_high=4e-4, eps_min=1.5e-4, eps_max=1e-3, ref_scale=0.0
)
def gapo_gspo(
    logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, eps_low, eps_high, eps_min, eps_max, ref_scale
):
    """GAPO on GSPO's sequence ratio (use aggregation "seq-mean-token-mean", as for "gspo")."""
    m = (jnp.asarray(mask_BxT) != 0).astype(jnp.float32)
    adv_B, _ = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    loss_B, stats = gapo_lib.gapo_gspo_objective(
        logps_BxT,
        old_logps_BxT,
        adv_B,
        mask_BxT,
        eps_low=eps_low,
        eps_high=eps_high,
        eps_min=eps_min,
        eps_max=eps_max,
        ref_scale=ref_scale,
    )
    # Each sequence's loss on each of its tokens: "seq-mean-token-mean" gives GSPO's mean.
    return loss_B[:, None] * m, {k.removesuffix("_B"): v[:, None] * m for k, v in stats.items()}


def gapo_batch_scale(adv_BxT, mask_BxT) -> float:
    """Ā of a whole RL batch: the mean |A_i| over rows with a loss token and A_i ≠ 0.

    The losses above see one micro-batch at a time, so with ref_scale = 0 their
    Ā (hence every ε_i) depends on micro_batch_size and on the minibatch split.
    Computed once per batch after the credit stage and passed as the scale, the
    bounds are the same whatever the split (`adaptive_clip_bounds` with this
    value as ref_scale).

    Args:
      adv_BxT: the batch's final token advantages.
      mask_BxT: bool/{0,1} loss mask.
    Returns:
      Ā as a Python float (0.0 when every advantage is 0).
    """
    adv_B, valid_B = gapo_lib.sequence_advantages(adv_BxT, mask_BxT)
    a = np.abs(np.where(np.asarray(valid_B), np.asarray(adv_B, np.float64), 0.0))
    n = int((a > 0).sum())
    return float(a.sum() / n) if n else 0.0


# ------------------------------------------------------------------------------ CSCR
CSCR_FIELDS = ("cf_shift_correct_BxT", "cf_shift_incorrect_BxT")


@credit.TRANSFORMS.register(
    "cscr", requires=CSCR_FIELDS, alpha=1.0, combine="mean", budget="tokens"
)
def cscr(adv_BxT, batch, *, alpha, combine, budget):
    """CSCR: A'_t = w_t A_t, w_t ∝ (1 + s_t)^(−α), renormalised per rollout (`core.cscr`)."""
    return cscr_lib.cscr_advantages(
        adv_BxT,
        batch[CSCR_FIELDS[0]],
        batch[CSCR_FIELDS[1]],
        batch["mask_BxT"],
        alpha=alpha,
        combine=combine,
        budget=budget,
    )


# ------------------------------------------------------------------------------- GAR
def output_projection_VxD(model):
    """The model's output projection as [V, D] rows (tied: the embedding itself), float32."""
    if model.lm_head is None:
        return model.embed_tokens[...].astype(jnp.float32)
    return model.lm_head[...].T.astype(jnp.float32)


def gar_signatures_from_model(
    model, tokens_BxT, attention_mask_BxT, mask_BxT, *, variant="grad_hidden", chunk=1024
):
    """GAR signatures S_i of full sequences (prompt + response) under `model`.

    One forward pass for the final hidden states (no logits), then
    `core.gar.gar_signatures` over the response tokens: hidden state t predicts
    token t + 1, so token t of `mask_BxT` pairs with hidden state t − 1. No
    gradient flows (rewards are data).

    Args:
      model: a `rlvr_jax.models.transformer.Transformer`.
      tokens_BxT: int ids, context and response in one row (any padding).
      attention_mask_BxT: 1 at real tokens.
      mask_BxT: bool/{0,1}, the response tokens whose cross-entropy counts
        (for an expert anchor: the solution tokens).
      variant: "grad_hidden" or "grad" (`core.gar.VARIANTS`).
      chunk: vocabulary chunk size.
    Returns:
      sig_BxD float32 unit vectors (0 for rows without a response token).
    """
    out = model.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
    attn = jnp.asarray(attention_mask_BxT) != 0
    mask = (jnp.asarray(mask_BxT) != 0) & attn
    sig = gar_lib.gar_signatures(
        out.hidden[:, :-1],
        output_projection_VxD(model),
        tokens_BxT[:, 1:],
        mask[:, 1:],
        variant=variant,
        chunk=chunk,
    )
    return jax.lax.stop_gradient(sig)


def gar_rewards_from_signatures(
    sig_BxD,
    anchor_sig_GxKxD,
    anchor_valid_GxK,
    group_B,
    correct_B,
    *,
    beta=0.5,
    valid_B=None,
    aux_sig_GxJxD=None,
    aux_valid_GxJ=None,
    aux_weight=0.0,
    aux_reduce="mean",
):
    """GAR dense rewards of a batch from rollout and per-group anchor signatures.

    Args:
      sig_BxD: rollout signatures (`gar_signatures_from_model`).
      anchor_sig_GxKxD: K expert-anchor signatures per group (G = num_groups, static).
      anchor_valid_GxK: bool, which anchors exist.
      group_B: int32 group ids in [0, G).
      correct_B: bool verdicts.
      beta: β.
      valid_B: optional bool real rows.
      aux_sig_GxJxD, aux_valid_GxJ, aux_weight, aux_reduce: optional auxiliary
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
            aux_reduce=aux_reduce,
        )
    align_B, has_B = gar_lib.anchor_alignment(
        sig_BxD,
        jnp.asarray(anchor_sig_GxKxD)[group_B],
        jnp.asarray(anchor_valid_GxK)[group_B],
        **aux,
    )
    num_groups = anchor_sig_GxKxD.shape[0]
    rewards_B = gar_lib.gar_rewards(
        align_B, correct_B, group_B, num_groups, beta=beta, has_anchor_B=has_B, valid_B=valid_B
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


def _signature_fn(ctx, variant: str, chunk: int):
    """Jitted (params, rest, tokens, attn, mask) -> sig_BxD of the policy, built once per run."""
    key = ("gar/signature_fn", variant, int(chunk))
    if key not in ctx.cache:
        graphdef = ctx.policy.graphdef  # the layout of the policy's params / rest

        def fn(params, rest, tokens_BxT, attention_mask_BxT, mask_BxT):
            model = nnx.merge(graphdef, params, rest)
            return gar_signatures_from_model(
                model, tokens_BxT, attention_mask_BxT, mask_BxT, variant=variant, chunk=chunk
            )

        # Traced under the run's mesh rules, like the policy's scorer (params stay sharded).
        ctx.cache[key] = jax.jit(sharding.with_rules(fn, ctx.mesh, ctx.rules))
    return ctx.cache[key]


@signals.register("gar", provides=("rewards_B",), variant="grad_hidden", beta=0.5, chunk=1024)
def gar_signal(ctx, groups, batch, *, variant, beta, chunk):
    """GAR rewards: passing rollouts get β·max(0, a_i − mean a) added; others keep their reward.

    Signatures of the rollouts (their sampled response tokens) and of each
    prompt's expert solution (`anchor_rows`) under the *current* policy
    (`ctx.policy.params`, recomputed every step: GAR measures alignment in the
    policy's own gradient space, which moves as it trains). With the verifier's
    0/1 reward this is exactly `core.gar.gar_rewards` (1 + β·bonus or 0); ours:
    shaped rewards (overlong penalties, partial credit) are kept and the GAR
    bonus is added on passing rows, so failing rows keep their reward. A problem
    without a solution gives its group no anchor (bonus 0).

    Options (config.score.gar.*): variant ("grad_hidden" | "grad"), beta (β),
    chunk (vocabulary chunk of the signature kernel).
    Returns:
      {"rewards_B": float32 [R]}.
    """
    fn = _signature_fn(ctx, variant, chunk)
    params, rest, rows = ctx.policy.params, ctx.policy.rest, ctx.chunk
    resp = groups.response_mask & groups.attention_mask
    rows_in = (groups.tokens, groups.attention_mask, resp)
    sig_BxD = signals.map_row_chunks(fn, (params, rest), rows_in, chunk=rows)
    a_tok, a_attn, a_mask, has_P = anchor_rows(ctx.tokenizer, groups.problems, pad_id=ctx.pad_id)
    anchor_PxD = signals.map_row_chunks(fn, (params, rest), (a_tok, a_attn, a_mask), chunk=rows)
    gar_B, _ = gar_rewards_from_signatures(
        sig_BxD,
        anchor_PxD[:, None],
        has_P[:, None],
        batch["group_B"],
        batch["correct_B"],
        beta=beta,
        valid_B=batch["valid_B"],
    )
    rewards = np.asarray(batch["rewards_B"], np.float32)
    passed = np.asarray(batch["correct_B"], bool) & np.asarray(batch["valid_B"], bool)
    return {"rewards_B": np.where(passed, rewards + np.asarray(gar_B) - 1.0, rewards)}
