"""The default rollout: sample each requested row from the policy on its problem's prompt."""

from __future__ import annotations

from collections.abc import Sequence

from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, continue_prefixes, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.tokenizers import encode_prompt


def sample_rows(ctx: RolloutContext, prompts_R: Sequence[Sequence[int]], **kw):
    """The request's rows sampled on `prompts_R` (one prompt per row), prefixes continued.

    Rows are sampled one per prompt copy (n = 1): the same draws as n = count per
    prompt (the sampler's rows are independent; the key is per row position).

    Args:
      ctx: the rollout context.
      prompts_R: one token list per requested row.
      **kw: `params` (default `ctx.params()`), or passed to `Sampler.sample`
        (e.g. `noise_rows`, `state`).
    Returns:
      The sampler's Rollout, one row per requested row, `group` = the request's.
    """
    req = ctx.request
    prefixes = None
    if req.prefixes is not None:
        prefixes = [[] if p is None else list(p.tokens) for p in req.prefixes]
    params = kw.pop("params", None) or ctx.params()
    ro = ctx.sampler.sample(list(prompts_R), params, ctx.key, prefixes=prefixes, **kw)
    ro.group = req.group_R
    return continue_prefixes(ro, req.prefixes)


def plain_prompts(ctx: RolloutContext) -> list[list[int]]:
    """Each requested row's problem prompt, chat-rendered."""
    prompts = [encode_prompt(ctx.tokenizer, p.prompt) for p in ctx.request.problems]
    return [prompts[g] for g in ctx.request.group_R]


@ROLLOUTS.register("plain", asynchronous=True)
def plain(ctx: RolloutContext) -> Groups:
    """Sampling: each row is the policy's response to its problem's prompt (μ = π_old)."""
    return scored_groups(ctx, sample_rows(ctx, plain_prompts(ctx)))
