"""NC-GRPO's rollout (`rollout.name = "latent_noise"`): noise in the prompt encoding of half
of every group.

Paper-fixed (abstract): scale-calibrated Gaussian noise is added to the last
hidden layer of the prompt-encoding pass for half of each rollout group, so
those rollouts branch from a displaced departure state; the objective, reward
and inference protocol are unchanged. Here: the sampler's
`SamplingParams.prompt_noise_sigma` (σ in units of each position's hidden RMS,
`models.HiddenPerturbation(relative_to_rms=True)`) at `prompt_noise_layer`
during prefill, for the first ⌊fraction·n⌋ rows of each group of n (the others
are clean). The noise is in the context only: decoding is clean.

π_old: the paper changes only the inference engine, so the trainer's old
log-probs are the clean policy's re-score of the noisy rollouts (our reading;
`loss.recompute_old_logps = True`, which `validate` requires with
`old_logps = "clean"`); "noisy" keeps the sampler's log-probs (μ, under the
noise) as π_old. Ours: σ = 0.5 by default (the abstract does not give it).
Rows report `noise_B`; the trainer logs their share, reward and pass rate
against the clean rows (`rollout/noise*`).
"""

from __future__ import annotations

import numpy as np

from rlvr_jax.registry import in_range, one_of
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, scored_groups
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.rollout.plain import plain_prompts, sample_rows

OLD_LOGPS = ("clean", "noisy")


def first_rows(counts, fraction: float) -> np.ndarray:
    """[R] bool: the first ⌊fraction·n⌋ rows of each group of n rows."""
    return np.concatenate(
        [np.arange(n) < int(np.floor(fraction * n)) for n in counts] or [np.zeros(0, bool)]
    )


def _check(c) -> None:
    r = c.rollout.latent_noise
    one_of("rollout.latent_noise.old_logps", r.old_logps, OLD_LOGPS)
    in_range("rollout.latent_noise", r, "sigma", 0.0, 1e3)
    in_range("rollout.latent_noise", r, "fraction", 0.0, 1.0)


# old_logps "clean": μ (the noisy policy) differs from π_old on the noisy rows.
@ROLLOUTS.register(
    "latent_noise",
    check=_check,
    off_policy=lambda options: options["old_logps"] == "clean",
    sigma=0.5,
    layer=-1,
    fraction=0.5,
    old_logps="clean",
)
def latent_noise(ctx: RolloutContext, *, sigma, layer, fraction, old_logps) -> Groups:
    """Half of every group sampled with Gaussian noise (σ · hidden RMS) in the prompt encoding.

    Options: sigma (σ), layer (block after which the noise is added; −1 = the
    last), fraction (noisy share of each group; the paper's ½), old_logps
    ("clean" or "noisy", see the module docstring; read by `validate`).
    """
    del old_logps  # the score stage's choice (loss.recompute_old_logps)
    if ctx.request.prefixes is not None:
        raise ValueError("config.rollout.name = 'latent_noise' cannot continue prefixes (PAIR)")
    noisy = first_rows(ctx.request.counts, fraction)
    params = ctx.params(prompt_noise_sigma=float(sigma), prompt_noise_layer=int(layer))
    ro = sample_rows(ctx, plain_prompts(ctx), params=params, noise_rows=noisy.tolist())
    return scored_groups(ctx, ro, info={"noise_B": noisy})
