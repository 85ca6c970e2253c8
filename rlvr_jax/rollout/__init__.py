"""The rollout stage: plug-ins that generate and score the rows the select stage asks for.

`ROLLOUTS` maps `config.rollout.name` to `fn(ctx: RolloutContext, **options) -> Groups`
(`rollout.base`); "plain" samples the policy on each prompt. Also here: `Groups`,
`score_rows` (cut → decode → verify, shared with evaluation) and `run_episodes`.
"self_play" (SpyRL) returns its own sub-groups (`groups.SUBGROUP`). Each plug-in's
registry entry declares its options, its `check(config)`, the per-row info fields it
provides (`provides`) and whether its rows are off-policy; `EVALUATORS` holds the
tasks' own evaluations, added by the plug-in that owns them.
"""

from rlvr_jax.rollout import (  # noqa: F401
    branching,
    guided,
    noise,
    plain,
    reflective,
    scaffold,
    self_play,
)
from rlvr_jax.rollout.base import EVALUATORS, ROLLOUTS, Prefix, Request, RolloutContext
from rlvr_jax.rollout.groups import Groups, stack_rows
from rlvr_jax.rollout.multiturn import Episodes, observation_ids, observation_text, run_episodes
from rlvr_jax.rollout.score import Verdicts, score_rows
from rlvr_jax.tokenizers import cut_at_stop

__all__ = ["EVALUATORS", "ROLLOUTS", "Episodes"]
__all__ += ["Groups", "Prefix", "Request", "RolloutContext", "Verdicts"]
__all__ += ["cut_at_stop", "observation_ids", "observation_text", "run_episodes"]
__all__ += ["score_rows", "stack_rows"]
