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
    params = kw.pop("params", None) or ctx.params()
    prefixes = request_prefixes(ctx)
    return as_requested(
        ctx, ctx.sampler.sample(list(prompts_R), params, ctx.key, prefixes=prefixes, **kw)
    )


def request_prefixes(ctx: RolloutContext) -> list[list[int]] | None:
    """The request's forced tokens per row (`Sampler.sample`'s `prefixes`), or None."""
    if ctx.request.prefixes is None:
        return None
    return [[] if p is None else list(p.tokens) for p in ctx.request.prefixes]


def as_requested(ctx: RolloutContext, ro):
    """Sampled rows (one per requested row) as the request's: its groups, prefixes continued."""
    ro.group = ctx.request.group_R
    return continue_prefixes(ro, ctx.request.prefixes)


def plain_prompts(ctx: RolloutContext) -> list[list[int]]:
    """Each requested row's problem prompt, chat-rendered."""
    prompts = [encode_prompt(ctx.tokenizer, p.prompt) for p in ctx.request.problems]
    return [prompts[g] for g in ctx.request.group_R]


@ROLLOUTS.register("plain", asynchronous=True)
def plain(ctx: RolloutContext) -> Groups:
    """Sampling: each row is the policy's response to its problem's prompt (μ = π_old)."""
    return scored_groups(ctx, sample_rows(ctx, plain_prompts(ctx)))
