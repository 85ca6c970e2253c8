"""Per-token likelihood shift between two checkpoints, aligned to the first arithmetic operation.

Responses are sampled from checkpoint B (the RL policy) and scored by both A (the
base) and B; Δ_t = log p_B(y_t) − log p_A(y_t) per response token. Each response
is aligned at the token holding the operator of its first step line ("10 + 8 =
18": the " +" token) — offset 0; the entrance (first operand and operator) is
offsets ≤ 0. Shifts are averaged over a problem's responses, then over problems.
"Locked at the Entrance" finds |Δ| 11–16x larger before the first operation than
after it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from rlvr_jax.models.scoring import token_logps
from rlvr_jax.sampling import Sampler, SamplingParams
from rlvr_jax.tasks.countdown import first_operator_span
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt


def operator_token_index(tokenizer, ids: Sequence[int]) -> int | None:
    """Index in `ids` of the token holding the first step's operator, or None without a step."""
    span = first_operator_span(tokenizer.decode(list(ids)))
    if span is None:
        return None
    for j in range(len(ids)):  # the first token whose decoded prefix passes the operator
        if len(tokenizer.decode(list(ids[: j + 1]))) > span[0]:
            return j
    return None


def aligned_shift(
    deltas: Sequence[np.ndarray], anchors: Sequence[int], problem_ids: Sequence[int], window: int
) -> dict[str, Any]:
    """Shift curves around the anchor, response → problem → mean over problems.

    Args:
      deltas: per response, Δ_t over its response tokens.
      anchors: per response, the index of its anchor token (the first operator).
      problem_ids: per response, which problem it answers.
      window: curve offsets −window..window.
    Returns:
      dict: "offsets" [2W+1]; "mean_abs" and "mean" [2W+1] (NaN where no problem
      has a token at that offset); "problems" [2W+1] (problems averaged there);
      "pre" / "post": mean |Δ| over offsets ≤ 0 / > 0 (all offsets, not only
      the window), averaged per problem then over problems with both; "ratio"
      pre / post; "num_problems", "num_responses".
    """
    offsets = np.arange(-window, window + 1)
    per_problem: dict[int, list] = {}
    for d, a, p in zip(deltas, anchors, problem_ids, strict=True):
        d = np.asarray(d, np.float64)
        rel = np.arange(len(d)) - a
        curve_abs = np.full(len(offsets), np.nan)
        curve = np.full(len(offsets), np.nan)
        inside = np.abs(rel) <= window
        curve_abs[rel[inside] + window] = np.abs(d[inside])
        curve[rel[inside] + window] = d[inside]
        pre = np.abs(d[rel <= 0]).mean() if (rel <= 0).any() else np.nan
        post = np.abs(d[rel > 0]).mean() if (rel > 0).any() else np.nan
        per_problem.setdefault(p, []).append((curve_abs, curve, pre, post))

    with warnings.catch_warnings():  # a mean over no tokens is NaN by design
        warnings.simplefilter("ignore", RuntimeWarning)
        stacked = [
            np.array([np.nanmean(np.stack([r[i] for r in rs]), 0) for rs in per_problem.values()])
            for i in range(4)
        ]
        abs_pxo, mean_pxo, pre_p, post_p = stacked
        both = ~np.isnan(pre_p) & ~np.isnan(post_p)
        pre = float(pre_p[both].mean()) if both.any() else float("nan")
        post = float(post_p[both].mean()) if both.any() else float("nan")
        if not per_problem:  # no response had a step line: NaN curves, no problems
            abs_pxo = mean_pxo = np.full((1, len(offsets)), np.nan)
        return {
            "offsets": offsets.tolist(),
            "mean_abs": np.nanmean(abs_pxo, 0).tolist(),
            "mean": np.nanmean(mean_pxo, 0).tolist(),
            "problems": [int(x) for x in (~np.isnan(abs_pxo)).sum(0)],
            "pre": pre,
            "post": post,
            "ratio": pre / post if post else float("nan"),
            "num_problems": int(both.sum()),
            "num_responses": len(deltas),
        }


def make_scorer(model):
    """Jitted `(tokens_BxT, attention_mask_BxT) -> logps_BxT` (NumPy) of `model` as it is now."""
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda st, t, a: token_logps(nnx.merge(graphdef, st), t, a))
    return lambda t, a: np.asarray(fn(state, t, a))


def likelihood_shift(
    model_a,
    model_b,
    tokenizer,
    problems,
    *,
    n_samples: int = 8,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    window: int = 12,
    prompts_per_batch: int = 16,
) -> dict[str, Any]:
    """Samples from `model_b`, scores with both, returns `aligned_shift` of Δ = log p_B − log p_A.

    Args:
      model_a: checkpoint A (the base / early policy).
      model_b: checkpoint B (the RL policy); responses are its samples.
      tokenizer: shared by both.
      problems: Countdown problems.
      n_samples: responses per problem.
      max_new_tokens, temperature, seed: sampling.
      window: curve half-width in tokens.
      prompts_per_batch: prompts sampled together.
    Returns:
      `aligned_shift`'s dict plus "skipped" (responses without a step line).
    """
    stop_ids = tokenizer.stop_ids
    params = SamplingParams(
        temperature=temperature, max_new_tokens=max_new_tokens, stop_token_ids=stop_ids, n=n_samples
    )
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model_b, pad_id=pad)
    score_a, score_b = make_scorer(model_a), make_scorer(model_b)
    key = jax.random.PRNGKey(seed)
    deltas, anchors, pids, skipped = [], [], [], 0
    for lo in range(0, len(problems), prompts_per_batch):
        chunk = problems[lo : lo + prompts_per_batch]
        ro = sampler.sample(
            [encode_prompt(tokenizer, p.prompt) for p in chunk], params, jax.random.fold_in(key, lo)
        )
        diff = score_b(ro.tokens, ro.attention_mask) - score_a(ro.tokens, ro.attention_mask)
        for b in range(ro.tokens.shape[0]):
            ids = cut_at_stop(ro.sampled_tokens(b), stop_ids)
            anchor = operator_token_index(tokenizer, ids)
            if anchor is None:
                skipped += 1
                continue
            cols = np.nonzero(ro.response_mask[b])[0][: len(ids)]
            deltas.append(diff[b, cols])
            anchors.append(anchor)
            pids.append(lo + int(ro.group[b]))
    out = aligned_shift(deltas, anchors, pids, window)
    out["skipped"] = skipped
    return out


def plot_shift(result: dict[str, Any], path, title: str = "") -> None:
    """Mean |Δ log p| per offset from the first operator (offset 0), as a PNG.

    Offsets that fewer than a quarter of the problems reach (long preambles) are
    left out of the plot (they stay in `result`).
    """
    import matplotlib  # lazy: heavy, and only needed for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use("Agg")

    counts = np.asarray(result["problems"])
    keep = counts >= max(1, 0.25 * counts.max()) if counts.size else counts.astype(bool)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(
        np.asarray(result["offsets"])[keep], np.asarray(result["mean_abs"])[keep], marker="o", ms=3
    )
    ax.axvline(0, color="gray", ls="--", lw=1)
    ax.set_xlabel("token offset from the first operator")
    ax.set_ylabel("mean |Δ log p| (RL − base)")
    ratio = result["ratio"]
    ax.set_title(title or f"pre/post first operation: {ratio:.1f}x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
