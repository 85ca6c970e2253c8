"""The rollout stage: plug-ins that generate and score the rows the select stage asks for.

`ROLLOUTS` maps `config.rollout.name` to `fn(ctx: RolloutContext, **options) -> Groups`
(`rollout.base`); "plain" samples the policy on each prompt. Also here: `Groups`,
`score_rows` (cut → decode → verify, shared with evaluation) and `run_episodes`.
"self_play" (SpyRL) returns its own sub-groups (`groups.SUBGROUP`).
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
from rlvr_jax.rollout.base import ROLLOUTS, Prefix, Request, RolloutContext
from rlvr_jax.rollout.groups import Groups, stack_rows
from rlvr_jax.rollout.multiturn import Episodes, observation_ids, observation_text, run_episodes
from rlvr_jax.rollout.score import Verdicts, score_rows
from rlvr_jax.tokenizers import cut_at_stop

# Per-row fields (Groups.info) of a rollout that later stages may require, by rollout name.
INFO_FIELDS = {
    "branching": branching.TREE_FIELDS,
    "reflective": (reflective.GUIDANCE_FIELD,),
}

# Tasks with an evaluation besides pass@k, by task name: fn(sampler, tokenizer,
# problems, params, key, frozen_state) -> metrics, frozen_state the run's initial
# policy (the "who is the spy" games against a frozen opponent, whatever the rollout).
EVALUATORS = {"spy_describe": self_play.evaluate_vs_frozen}

__all__ = ["EVALUATORS", "INFO_FIELDS", "ROLLOUTS", "Episodes"]
__all__ += ["Groups", "Prefix", "Request", "RolloutContext", "Verdicts"]
__all__ += ["cut_at_stop", "observation_ids", "observation_text", "run_episodes"]
__all__ += ["score_rows", "stack_rows"]
