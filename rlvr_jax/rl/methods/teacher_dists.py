"""Score-stage signals with a teacher's whole next-token distribution (distribution-level KL).

  teacher_hidden  teacher_hidden_BxTxD       the teacher's final hidden states at each
                                             sampled position (loss opd_full_kl, with the
                                             teacher's output kernel: `teacher_output_kernel`)
  teacher_topk    teacher_topk_logps_BxTxK,  its k most likely next tokens and their
                  teacher_topk_ids_BxTxK     log-probs (loss opd_topk_kl)

Teachers as the "teacher" signal's (`model_signals`): a warm start, a
pretrained directory, or the policy itself under a privileged view (source
"hint", re-laid out like `model_signals.policy_context_logps`). Entry t is the
state that predicts token t, so the fields align with the log-probs. Neither
ever forms a [B, T, V] array: the top-k is chunked over the vocabulary
(`models.vocab.topk_logps`), and the hidden states are the compact form of the
full distribution.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models import load_pretrained, vocab
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods.model_signals import (
    load_teacher,
    map_back,
    relayout,
    render_prompts,
    teacher_diagnostics,
)
from rlvr_jax.train import privileged, warmstart


def make_state_fn(graphdef, *, topk: int = 0):
    """Jitted `(params, rest, tokens, attn)` -> the model's next-token states, aligned like logps.

    One forward. topk = 0: the final hidden states [B, T, D] (entry t predicts
    token t; 0 at t = 0; `scoring.token_logps(return_hidden=True)`). topk > 0:
    the k most likely tokens' log-probs and ids (`models.vocab.topk_logps`,
    chunked over the vocabulary; ids < 2^24 are exact). Either way the
    log-prob of the row's own token t is appended, all as one float32
    [B, T, D + 1] / [B, T, 2K + 1] array (`split_states`, `unpack_topk`).
    """

    def states(params, rest, tokens, attn):
        model = nnx.merge(graphdef, params, rest)
        lp_tok, h = token_logps(model, tokens, attn, return_hidden=True)
        own = lp_tok[..., None]
        if not topk:
            return jnp.concatenate([h.astype(jnp.float32), own], -1)
        lp, ids = vocab.topk_logps(h, model.output_kernel(), topk)
        return jnp.concatenate([lp, ids.astype(jnp.float32), own], -1)

    return jax.jit(states)


def split_states(states_BxTxD1):
    """`make_state_fn(topk=0)`'s output -> (hidden_BxTxD, token logps_BxT)."""
    return states_BxTxD1[..., :-1], states_BxTxD1[..., -1]


def unpack_topk(packed_BxTx2K1):
    """`make_state_fn(topk=k)`'s output -> (logps_BxTxK, ids_BxTxK int32, token logps_BxT)."""
    k = (packed_BxTx2K1.shape[-1] - 1) // 2
    ids = np.rint(packed_BxTx2K1[..., k : 2 * k]).astype(np.int32)
    return packed_BxTx2K1[..., :k], ids, packed_BxTx2K1[..., -1]


def _teacher_model(ctx, *, source, domain, role, path):
    """(graphdef, params, rest) of the teacher: the policy at π_old for source "hint"."""
    if source == "hint":
        p = ctx.policy
    else:  # loaded once per run, vocabulary checked (`model_signals.load_teacher`)
        p = load_teacher(ctx, source=source, domain=domain, role=role, path=path)
    return p.graphdef, p.params, p.rest


def _loaded_teacher(config, *, source, domain, role, path):
    if source == "warm_start":
        model = warmstart.load_warm_start(domain or config.model.domain, role).model
    else:
        model, _ = load_pretrained(path)
    return nnx.split(model, nnx.Param, ...)


def teacher_output_kernel(config) -> np.ndarray | None:
    """The external teacher's [E, V] output kernel for full-vocabulary KL losses.

    None for the self-teacher (source "hint": the update uses the policy's own
    kernel, stop-gradient).
    """
    t = config.score.teacher_hidden
    if t.source == "hint":
        return None
    graphdef, params, rest = _loaded_teacher(
        config, source=t.source, domain=t.domain, role=t.role, path=t.path
    )
    return np.asarray(nnx.merge(graphdef, params, rest).output_kernel(), np.float32)


def _teacher_states(ctx, groups, batch, *, topk, source, domain, role, path, template, option):
    graphdef, params, rest = _teacher_model(ctx, source=source, domain=domain, role=role, path=path)
    key = ("state_fn", graphdef, topk)
    if key not in ctx.cache:
        ctx.cache[key] = make_state_fn(graphdef, topk=topk)
    fn, chunk = ctx.cache[key], ctx.chunk
    rows = len(groups.tokens)
    if source == "hint":
        prompts = render_prompts([template] * rows, groups, ctx.tokenizer, ctx.task, option=option)
        layout = relayout(
            prompts, groups.tokens, groups.attention_mask, groups.prompt_mask, pad_id=ctx.pad_id
        )
        out = signals.map_row_chunks(
            fn, (params, rest), (layout.tokens, layout.attention_mask), chunk=chunk
        )
        return map_back(out, layout, groups.tokens.shape[1])
    args = (batch["tokens_BxT"], batch["attention_mask_BxT"])
    return signals.map_row_chunks(fn, (params, rest), args, chunk=chunk)


_TEACHER_OPTIONS = dict(
    source="warm_start", domain="", role="teacher", path="", template="", diagnostics=True
)


@signals.register("teacher_hidden", provides=("teacher_hidden_BxTxD",), **_TEACHER_OPTIONS)
def teacher_hidden(ctx, groups, batch, *, source, domain, role, path, template, diagnostics):
    """The teacher's final hidden states at each sampled position (full-vocabulary KL losses).

    Options as the "teacher" signal's (template: the view of source "hint";
    "" = SOLUTION_VIEW). With the teacher's output kernel (the update's
    teacher_kernel_DxV) they give the teacher's whole next-token distribution
    without a [B, T, V] array. 0 outside mask_BxT. diagnostics: the same
    forward's log-probs of the sampled tokens feed `teacher_diagnostics`
    ("teacher_hidden/*" in the step's metrics).
    """
    states = _teacher_states(
        ctx,
        groups,
        batch,
        topk=0,
        source=source,
        domain=domain,
        role=role,
        path=path,
        template=template or privileged.SOLUTION_VIEW,
        option="score.teacher_hidden.template",
    )
    h, lp = split_states(states)
    m = np.asarray(batch["mask_BxT"], bool)
    if diagnostics:
        teacher_diagnostics(ctx, groups, batch, np.where(m, lp, 0.0), prefix="teacher_hidden")
    return {"teacher_hidden_BxTxD": np.where(m[..., None], h, 0.0).astype(np.float32)}


@signals.register(
    "teacher_topk",
    provides=("teacher_topk_logps_BxTxK", "teacher_topk_ids_BxTxK"),
    k=16,
    **_TEACHER_OPTIONS,
)
def teacher_topk(ctx, groups, batch, *, k, source, domain, role, path, template, diagnostics):
    """The teacher's k most likely next tokens and their log-probs at each sampled position.

    Options as the "teacher" signal's, plus k. Ids are 0 and log-probs 0 outside
    mask_BxT. diagnostics: `teacher_diagnostics` of the teacher's log-probs of
    the sampled tokens ("teacher_topk/*") and "teacher_topk/coverage", the
    share of sampled tokens inside the teacher's top k.
    """
    packed = _teacher_states(
        ctx,
        groups,
        batch,
        topk=int(k),
        source=source,
        domain=domain,
        role=role,
        path=path,
        template=template or privileged.SOLUTION_VIEW,
        option="score.teacher_topk.template",
    )
    lp, ids, own = unpack_topk(packed)
    mask = np.asarray(batch["mask_BxT"], bool)
    if diagnostics:
        teacher_diagnostics(ctx, groups, batch, np.where(mask, own, 0.0), prefix="teacher_topk")
        inside = (ids == np.asarray(batch["tokens_BxT"])[..., None]).any(-1)
        ctx.metrics["teacher_topk/coverage"] = float(inside[mask].mean()) if mask.any() else 0.0
    m = mask[..., None]
    return {
        "teacher_topk_logps_BxTxK": np.where(m, lp, 0.0).astype(np.float32),
        "teacher_topk_ids_BxTxK": np.where(m, ids, 0).astype(np.int32),
    }
