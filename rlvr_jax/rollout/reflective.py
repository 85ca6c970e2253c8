"""GRSD's rollout (`rollout.name = "reflective"`): verified trajectories, reflections, guidance.

Paper-fixed (abstract, "Group-Reflective Self-Distillation"): for each prompt
the policy reflects on each verified trajectory of its on-policy group; a
stop-gradient snapshot contrasts the reflections of successful and failed
rollouts into group-level privileged guidance; a self-teacher conditioned on
it modulates the outcome advantages (score signal "guidance", transform
"grsd", `core.grsd`).

Here: the trajectories are the "plain" rollout's (single-turn tasks) or the
"multi_turn" rollout's (tasks with an environment, e.g. tool_lookup), verified
as those rollouts verify them. Then, with the weights that sampled them (the
snapshot: the rollout never takes gradients), in two sampler calls:
  1. one reflection per trajectory, at most `reflection_tokens` tokens, on
     `reflect_template` ({prompt}, {response}: the decoded trajectory after the
     prompt, {verdict}: "correct" / "wrong");
  2. one guidance text per group with both successes and failures, at most
     `guidance_tokens` tokens, on `guide_template` ({prompt}, {successes},
     {failures}: the reflections, one "- " line each). Groups whose rows all
     agree have no contrast (and a zero GRPO advantage): no guidance; nor
     does a group whose guidance generation is empty (it stops at once).
The rows are the trajectories alone (reflections and guidance are never
trained on). Each row carries its group's guidance as token ids,
`guidance_ids_BxN` (N = guidance_tokens, −1 padding; all −1: none), and reports
reflection_len_B and guidance_len_B (NaN where a group has none), which the
trainer logs; the first `log_examples` groups with guidance are logged as text
each step. Multi-process: which groups get guidance differs per host, and the
guidance sampler call is a collective, so a host without mixed groups joins
another's call with one filler text it drops. Ours: the templates' wording, 32-token
reflections, 48-token guidance.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.registry import in_range
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext
from rlvr_jax.rollout.groups import Groups
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt

log = logging.getLogger(__name__)

GUIDANCE_FIELD = "guidance_ids_BxN"
REFLECT_TEMPLATE = (
    "{prompt}\nAn attempt:\n{response}\nThe attempt is {verdict}. In one or two sentences, "
    "what made it {verdict}?"
)
GUIDE_TEMPLATE = (
    "{prompt}\nWhat worked in successful attempts:\n{successes}\nWhat went wrong in failed "
    "attempts:\n{failures}\nWrite short guidance for solving this problem."
)


def _generate(ctx: RolloutContext, texts: list[str], max_tokens: int, key) -> list[list[int]]:
    """The policy's completion of each text (chat-rendered), cut at the first stop id."""
    prompts = [encode_prompt(ctx.tokenizer, t) for t in texts]
    params = dataclasses.replace(ctx.sampling, n=1, max_new_tokens=int(max_tokens))
    ro = ctx.sampler.sample(prompts, params, key)
    stops = ctx.tokenizer.stop_ids
    return [
        cut_at_stop(ro.tokens[r][ro.response_mask[r]].tolist(), stops) for r in range(len(texts))
    ]


def _check(c) -> None:
    r = c.rollout.reflective
    for field in ("reflection_tokens", "guidance_tokens"):
        in_range("rollout.reflective", r, field, 1, 1 << 16)
    in_range("rollout.reflective", r, "log_examples", 0, 1 << 16)


@ROLLOUTS.register(
    "reflective",
    check=_check,
    provides=(GUIDANCE_FIELD,),
    reflection_tokens=32,
    guidance_tokens=48,
    reflect_template=REFLECT_TEMPLATE,
    guide_template=GUIDE_TEMPLATE,
    log_examples=1,
)
def reflective(
    ctx: RolloutContext,
    *,
    reflection_tokens,
    guidance_tokens,
    reflect_template,
    guide_template,
    log_examples,
) -> Groups:
    """GRSD's trajectories with their group guidance (module doc)."""
    req = ctx.request
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'reflective' cannot continue prefixes (PAIR)")
    k_traj, k_reflect, k_guide = jax.random.split(ctx.key, 3)
    sub = dataclasses.replace(ctx, key=k_traj)
    if ctx.task.episode_turns():
        groups = ROLLOUTS.get("multi_turn").fn(sub, max_turns=0)
    else:
        groups = ROLLOUTS.get("plain").fn(sub)
    tok = ctx.tokenizer
    after = groups.attention_mask & ~groups.prompt_mask
    # A single-turn response ends at its stop token; an episode keeps every turn and observation.
    stops = () if ctx.task.episode_turns() else tok.stop_ids
    responses = [tok.decode(cut_at_stop(groups.tokens[r][after[r]].tolist(), stops))
                 for r in range(len(groups.group))]  # fmt: skip
    prompts = [groups.problems[g].prompt for g in groups.group]
    verdicts = ["correct" if c else "wrong" for c in groups.correct]
    texts = [
        reflect_template.format(prompt=p, response=x, verdict=v)
        for p, x, v in zip(prompts, responses, verdicts, strict=True)
    ]
    reflections = _generate(ctx, texts, reflection_tokens, k_reflect)
    notes = [tok.decode(x) for x in reflections]
    mixed = [g for g in range(groups.num_groups)
             if len(set(groups.correct[groups.group == g].tolist())) > 1]  # fmt: skip
    guide_texts = []
    for g in mixed:
        rows = np.flatnonzero(groups.group == g)
        lines = {c: "\n".join(f"- {notes[r]}" for r in rows if groups.correct[r] == c)
                 for c in (True, False)}  # fmt: skip
        guide_texts.append(
            guide_template.format(
                prompt=groups.problems[g].prompt, successes=lines[True], failures=lines[False]
            )
        )
    # Sampling is a collective: a process without mixed groups joins another's guidance
    # call with one filler text (dropped).
    guidance, any_mixed = [], distributed.agree(bool(mixed))
    if mixed:
        guidance = _generate(ctx, guide_texts, guidance_tokens, k_guide)
    elif any_mixed:
        _generate(ctx, [texts[0]], guidance_tokens, k_guide)
    ids = np.full((len(groups.group), int(guidance_tokens)), -1, np.int32)
    guidance_len = np.full(len(groups.group), np.nan, np.float32)
    for g, text_ids in zip(mixed, guidance, strict=True):
        if not text_ids:  # an empty generation: no guidance (as its rows' ids cannot say "")
            continue
        rows = groups.group == g
        ids[rows, : len(text_ids)] = text_ids
        guidance_len[rows] = len(text_ids)
    logged = [(g, x) for g, x in zip(mixed, guidance, strict=True) if x]
    for g, text_ids in logged[: int(log_examples)]:
        rows = np.flatnonzero(groups.group == g)
        log.info(
            "GRSD group %d reflections:\n%s\nguidance: %s",
            g,
            "\n".join(f"  [{verdicts[r]}] {notes[r]!r}" for r in rows),
            repr(tok.decode(text_ids)),
        )
    info = dict(groups.info)
    info[GUIDANCE_FIELD] = ids
    info["reflection_len_B"] = np.array([len(x) for x in reflections], np.float32)
    info["guidance_len_B"] = guidance_len
    return dataclasses.replace(groups, info=info)
