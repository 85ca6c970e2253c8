"""GRSD's score signal ("guidance") and credit transform ("grsd").

  guidance  requires guidance_ids_BxN (rollout "reflective")  provides guidance_logps_BxT
  grsd      requires guidance_logps_BxT                        core.grsd

The self-teacher is the current policy (π_old's weights) with its group's
guidance in the prompt (`template`, fields {prompt} and {guidance}): each row
is re-laid out behind that prompt, scored, and mapped back onto its own columns
(`model_signals.relayout` / `map_back`), so guidance_logps_BxT[i, t] scores the
same token as old_logps_BxT[i, t]. Rows of a group without guidance (no
success/failure contrast) keep ℓ^T = ℓ^S exactly (weight 1). Logged per step:
grsd/guided_rows (share of rows with guidance), grsd/shift (mean ℓ^T − ℓ^S over
their tokens) and grsd/abs_shift (mean |ℓ^T − ℓ^S|). Ours: the template wording.
"""

from __future__ import annotations

import numpy as np

from rlvr_jax import distributed
from rlvr_jax.core import grsd as grsd_lib
from rlvr_jax.rl import credit, signals
from rlvr_jax.rl.methods.model_signals import map_back, relayout
from rlvr_jax.rollout.reflective import GUIDANCE_FIELD
from rlvr_jax.tokenizers import encode_prompt


@signals.register(
    "guidance",
    provides=("guidance_logps_BxT",),
    requires=(GUIDANCE_FIELD,),
    template="{prompt}\nGuidance: {guidance}",
)
def guidance(ctx, groups, batch, *, template):
    """ℓ^T: the policy's log-probs of the sampled tokens with its group's guidance in the prompt."""
    ids = np.asarray(batch[GUIDANCE_FIELD])
    mask = np.asarray(batch["mask_BxT"], bool)
    old = np.asarray(batch["old_logps_BxT"], np.float32)
    guided = (ids >= 0).any(-1) & np.asarray(batch["valid_B"], bool)
    out = np.where(mask, old, 0.0).astype(np.float32)
    # The scorer is a collective: a process without guided rows joins another's call.
    if distributed.agree(guided.any()) and not guided.any():
        ctx.policy.logps(np.zeros((0, 1), np.int32), np.zeros((0, 1), bool))
    if guided.any():
        rows = np.flatnonzero(guided)
        texts = {}
        for r in rows:
            key = (int(groups.group[r]), tuple(ids[r][ids[r] >= 0].tolist()))
            if key not in texts:
                problem = groups.problems[key[0]]
                try:
                    text = template.format(
                        prompt=problem.prompt, guidance=ctx.tokenizer.decode(key[1])
                    )
                except KeyError as e:
                    raise ValueError(
                        f"config.score.guidance.template = {template!r} uses {e}; valid fields: "
                        "prompt, guidance"
                    ) from None
                texts[key] = encode_prompt(ctx.tokenizer, text)
        prompts = [texts[(int(groups.group[r]), tuple(ids[r][ids[r] >= 0].tolist()))] for r in rows]
        layout = relayout(
            prompts,
            groups.tokens[rows],
            groups.attention_mask[rows],
            groups.prompt_mask[rows],
            pad_id=ctx.pad_id,
        )
        lp = map_back(ctx.policy.logps(layout.tokens, layout.attention_mask), layout, mask.shape[1])
        out[rows] = np.where(mask[rows], lp, 0.0)
    on = mask & guided[:, None]
    d = (out - old)[on]
    ctx.metrics.update({
        "grsd/guided_rows": float(guided.mean()) if guided.size else 0.0,
        "grsd/shift": float(d.mean()) if d.size else 0.0,
        "grsd/abs_shift": float(np.abs(d).mean()) if d.size else 0.0,
    })  # fmt: skip
    return {"guidance_logps_BxT": out}


@credit.TRANSFORMS.register("grsd", requires=("guidance_logps_BxT",), lam=1.0, w_min=0.5, w_max=2.0)
def grsd(adv_BxT, batch, *, lam, w_min, w_max):
    """GRSD: each turn's advantages × clip(exp(λ·sign(A)·mean gap), w_min, w_max) (sign kept)."""
    out, _ = grsd_lib.grsd_advantages(
        adv_BxT,
        batch["guidance_logps_BxT"],
        batch["old_logps_BxT"],
        batch["mask_BxT"],
        lam=lam,
        w_min=w_min,
        w_max=w_max,
    )
    return out
