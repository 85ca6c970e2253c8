"""The reasoning-language reward of "GRPO Beyond English", as a score signal on the reward path.

  r_i ← r_i + w · 1[detect_language(response_i) = target]

with `detect_language` the marker-word detector of `tasks.multilingual` and the
target either a fixed language (config.score.language.language, e.g. "en":
reason in English whatever the prompt's language) or, when empty, each
problem's own prompt language (native reasoning). The verifier's reward is kept,
so a correct answer in the wrong language still beats a wrong one (for w < 1).
"""

from __future__ import annotations

import numpy as np

from rlvr_jax.rl import signals
from rlvr_jax.rl.methods.task_signals import step_rows
from rlvr_jax.tasks.multilingual import LANGUAGES, language_reward


def language_bonus(texts, targets, weight: float) -> np.ndarray:
    """w · 1[detected language = target] per row (0 where the text is None).

    Args:
      texts: decoded responses (None for rows without one).
      targets: the target language code of each row.
      weight: w.
    Returns:
      float32 [R].
    """
    return np.array(
        [
            0.0 if t is None else weight * language_reward(t, g)
            for t, g in zip(texts, targets, strict=True)
        ],
        np.float32,
    )


@signals.register("language", provides=("rewards_B",), weight=0.5, language="")
def language_signal(ctx, groups, batch, *, weight, language):
    """Adds the reasoning-language reward to every valid row's reward.

    Options (config.score.language.*): weight (w), language (the target code, or
    "" for each problem's metadata["language"]).
    Returns:
      {"rewards_B": float32 [R]}.
    """
    if language and language not in LANGUAGES:
        raise ValueError(
            f"config.score.language.language = {language!r}; valid: '', {', '.join(LANGUAGES)}"
        )
    rows = step_rows(ctx, groups)
    targets = []
    for row in rows:
        if row is not None and not language and "language" not in row.problem.metadata:
            raise ValueError(
                f"config.score.language.language is empty but task {ctx.task.name!r} has no "
                "problem language; set the target language"
            )
        targets.append(language or (row.problem.metadata["language"] if row else "en"))
    texts = [None if row is None else row.text for row in rows]
    rewards = np.asarray(batch["rewards_B"], np.float32)
    return {"rewards_B": rewards + language_bonus(texts, targets, weight)}
