"""The default rollout: sample each requested row from the policy on its problem's prompt."""

from __future__ import annotations

from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, continue_prefixes, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.tokenizers import encode_prompt


def sample_rows(ctx: RolloutContext, prompts: list[list[int]], **kw):
    """The request's rows sampled on `prompts` (one per group), prefixes continued.

    Rows are sampled one per prompt copy (n = 1): the same draws as n = count per
    prompt (the sampler's rows are independent; the key is per row position).

    Args:
      ctx: the rollout context.
      prompts: one token list per requested group.
      **kw: passed to `Sampler.sample` (e.g. `noise_rows`, `state`).
    Returns:
      The sampler's Rollout, one row per requested row.
    """
    req = ctx.request
    rows = [prompts[g] for g in req.group_R]
    prefixes = None
    if req.prefixes is not None:
        prefixes = [[] if p is None else list(p.tokens) for p in req.prefixes]
    ro = ctx.sampler.sample(rows, ctx.params(), ctx.key, prefixes=prefixes, **kw)
    ro.group = req.group_R
    return continue_prefixes(ro, req.prefixes)


@ROLLOUTS.register("plain")
def plain(ctx: RolloutContext) -> Groups:
    """Sampling: each row is the policy's response to its problem's prompt (μ = π_old)."""
    prompts = [encode_prompt(ctx.tokenizer, p.prompt) for p in ctx.request.problems]
    return scored_groups(ctx, sample_rows(ctx, prompts))
