"""Task options: the settings of the warm-start domains, and how a run resolves its own.

Both SFT (the warm starts are trained on `WARM_START_OPTIONS[domain]`) and RL
(a run on its warm start's own task uses the same options unless the config
gives others) read them, so they live below both.
"""

from __future__ import annotations

import json
from typing import Any

# Difficulty options chosen so that the base lands at pass@1 ~10-50% within a few
# minutes of training here (docs/base_models.md). Arithmetic uses + and - only: with
# * the products are not learned in this budget and pass@1 stays ~6%.
WARM_START_OPTIONS = {
    "countdown": dict(num_numbers=3, max_number=10, target_min=1, target_max=30),
    "arithmetic": dict(num_operands=3, max_operand=9, operators="+-"),
    # The arithmetic options rendered in French: a non-English prompt, step words
    # ("moins", "égale") and answer marker ("Réponse"), at the arithmetic cost per step.
    "multilingual_arithmetic": dict(num_operands=3, max_operand=9, operators="+-", language="fr"),
    # The same arithmetic, problem i in language i mod 4: one base for every language
    # (the common start of experiments/multilingual's train x eval matrix).
    "multilingual_mix": dict(
        num_operands=3, max_operand=9, operators="+-", languages="en,es,fr,de"
    ),
    # Two people, one connective per statement: ~125-token examples (solution ~50).
    "knights_knaves": dict(num_people=2, max_depth=1),
    # One lookup, then calc, then the answer: 3 model turns. One-syllable entity names
    # and no instruction preamble: with 2-3 syllable names (4-6 sentencepiece pieces)
    # the base copied no name correctly within 10 CPU minutes (pass@1 0.000).
    "tool_lookup": dict(num_lookups=1, max_name_syllables=1, instructions=False),
    # Three players (two civilians) and four attributes: the shortest games (vote
    # prompts ~120 tokens), 6 rows per game in SpyRL's self-play.
    "spy_describe": dict(num_players=3, num_attributes=4),
}


def resolve_options(options_json: str, task: str, warm_start_domain: str = "") -> dict[str, Any]:
    """A run's task options: its JSON options, or its warm start's for the warm start's task.

    Args:
      options_json: `config.task.options` (a JSON object string; "" = none given).
      task: `config.task.name`.
      warm_start_domain: the domain of the run's warm-start policy ("" if the
        policy is not a warm start).
    Returns:
      The options dict (empty: the task's defaults).
    """
    if options_json:
        try:
            options = json.loads(options_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"config.task.options is not a JSON object: {e}") from None
        if not isinstance(options, dict):
            raise ValueError(f"config.task.options must be a JSON object, got {options_json!r}")
        return options
    if warm_start_domain == task:
        return dict(WARM_START_OPTIONS.get(task, {}))
    return {}
