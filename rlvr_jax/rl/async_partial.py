"""Partial rollouts: a row still decoding when the learner publishes new weights continues
under them (or restarts), with every token tagged by the policy version that sampled it.

`async_rl.partial_rollouts` = "continue" | "abort" (with `async_rl.max_staleness` > 0)
makes the rollout worker decode in segments of `async_rl.segment_tokens` tokens.
Before each segment after the first it takes the newest published version:

  continue  rows that have not stopped carry on from their tokens under the new
            weights (slime / AReaL / PipelineRL's in-flight weight updates): a row
            spanning an update holds tokens of two or more versions, and μ of each
            token is the log-prob under the version that sampled it;
  abort     rows that have not stopped are cut back to their prompt (and forced
            prefix) and sampled again from there under the new weights; their
            discarded tokens are counted.

Which version a segment sees depends on when the learner publishes, so partial
rollouts are free-running: a run is not repeated exactly by a rerun or a resume
(see docs/async.md); the oldest token of step t is still at most k versions old.
Segments are `Sampler.continue_rollout` calls, which prefill each row's context
again (the static sampler) or its pages (the paged engine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from rlvr_jax.rollout import Groups, RolloutContext
from rlvr_jax.rollout.base import scored_groups, truncate
from rlvr_jax.rollout.plain import as_requested, plain_prompts, request_prefixes
from rlvr_jax.sampling import Rollout, Sampler, SamplingParams

PARTIAL_MODES = ("off", "continue", "abort")


@dataclasses.dataclass
class Segmented:
    """A segmented sample: the rows, each token's version and what aborts discarded.

    Attributes:
      rollout: the rows (`Sampler.sample`'s layout), μ = `rollout.logps`.
      version_BxL: [B, L] int32 version of each sampled token, -1 off `response_mask`.
      aborted_tokens: tokens sampled and then discarded by "abort".
      segments: decoding calls made.
    """

    rollout: Rollout
    version_BxL: np.ndarray
    aborted_tokens: int = 0
    segments: int = 1


def _version_array(ro: Rollout, versions: list[list[int]]) -> np.ndarray:
    out = np.full(ro.tokens.shape, -1, np.int32)
    for r, vs in enumerate(versions):
        cols = np.flatnonzero(ro.response_mask[r])
        if len(cols) != len(vs):  # the bookkeeping below must match the sampler's rows
            raise AssertionError(f"row {r}: {len(cols)} sampled tokens, {len(vs)} versions")
        out[r, cols] = vs
    return out


def segmented_sample(
    sampler: Sampler,
    model: nnx.Module,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    key: jax.Array,
    *,
    segment: int,
    mode: str,
    newest: Callable[[], tuple[int, Any]],
    prefixes: Sequence[Sequence[int]] | None = None,
) -> Segmented:
    """Samples one row per prompt in segments, switching to the newest weights between them.

    Args:
      sampler: samples with `model`'s current weights; model: the worker's copy.
      prompts: token ids, one row each (`params.n` must be 1).
      params: sampling parameters; `max_new_tokens` is the whole budget.
      key: the rows' key (segment j decodes with fold_in(key, j)).
      segment: tokens per segment (> 0); mode: "continue" or "abort".
      newest: () -> (version, parameters) of the newest published policy.
      prefixes: optional forced tokens per row (as `Sampler.sample`).
    """
    if params.n != 1 or mode not in ("continue", "abort") or segment < 1:
        raise ValueError(f"segmented_sample: n = {params.n}, mode = {mode!r}, segment = {segment}")
    version, weights = newest()
    nnx.update(model, weights)
    budget = params.max_new_tokens
    used = min(segment, budget)
    ro = sampler.sample(
        prompts, dataclasses.replace(params, max_new_tokens=used), jax.random.fold_in(key, 0),
        prefixes=prefixes,
    )  # fmt: skip
    versions = [[version] * int(n) for n in ro.response_mask.sum(-1)]
    aborted, j = 0, 0
    while used < budget:
        lengths = ro.response_mask.sum(-1)
        active = ~np.asarray(ro.stopped, bool) & (lengths == used)
        if not active.any():
            break
        latest, weights = newest()
        if latest != version:
            nnx.update(model, weights)
            version = latest
            if mode == "abort":  # unfinished rows start again under the new weights
                aborted += int(lengths[active].sum())
                ro = truncate(ro, np.where(active, 0, lengths), params.stop_token_ids)
                versions = [[] if a else v for a, v in zip(active, versions, strict=True)]
                used = 0
        j += 1
        n = min(segment, budget - used)
        ro = sampler.continue_rollout(
            ro,
            [[] if a else None for a in active],
            dataclasses.replace(params, max_new_tokens=n),
            jax.random.fold_in(key, j),
        )
        new_lengths = ro.response_mask.sum(-1)
        for r in np.flatnonzero(active):
            versions[r] += [version] * int(new_lengths[r] - len(versions[r]))
        used += n
    return Segmented(ro, _version_array(ro, versions), aborted, j + 1)


def staleness_counts(version_BxL: np.ndarray, step: int, k: int) -> dict[str, np.ndarray]:
    """Per row, the number of sampled tokens at each staleness s = step − version, s ∈ [0, k]."""
    sampled = version_BxL >= 0
    return {
        f"tokens_staleness_{s}": ((version_BxL == step - s) & sampled).sum(-1).astype(np.float32)
        for s in range(k + 1)
    }


def partial_rollout(
    ctx: RolloutContext,
    model: nnx.Module,
    *,
    step: int,
    k: int,
    segment: int,
    mode: str,
    newest: Callable[[], tuple[int, Any]],
) -> Groups:
    """The plain rollout stage with partial rollouts: `ctx.request`'s rows, verified.

    Each row's per-staleness token counts are `Groups.info["tokens_staleness_<s>"]`
    (logged as info/…); rows discarded by "abort" are counted in
    `info["aborted_tokens"]` (spread over the rows that restarted).
    """
    out = segmented_sample(
        ctx.sampler, model, plain_prompts(ctx), ctx.params(), ctx.key,
        segment=segment, mode=mode, newest=newest, prefixes=request_prefixes(ctx),
    )  # fmt: skip
    rows = len(ctx.request.group_R)
    info = staleness_counts(out.version_BxL, step, k)
    info["aborted_tokens"] = np.full(rows, out.aborted_tokens / rows)
    return scored_groups(ctx, as_requested(ctx, out.rollout), info)
