"""SpyRL's rollout (`rollout.name = "self_play"`): "who is the spy" games, rewarded by the vote.

Paper-fixed (abstract, "From RLVR to RLSVR", SpyRL): agents receive asymmetric
information, do the same target task, then vote to identify a designated spy;
because the spy is fixed in advance, the vote outcome is a verifiable reward.

Here (task `spy_describe`, `rlvr_jax.tasks.spy`: a civilian record and a spy
record of one generated thing, differing in a few attributes): a game is N =
`num_players` players of one problem, its predetermined spy `spy_index`. Each
requested group of G rows is G / (2N) games of its problem (`validate` requires
config.data.group_size to be a multiple of 2N; a shorter group, the padding rows
the select stage adds to a round and then drops, plays whole games and keeps its
first rows), played by the current
policy in two sampler calls for all players of all games of the round:
  1. describe: every player's `player_prompt` (its own word and record);
  2. vote: every player's `vote_prompt` with the game's N descriptions.
`score_game` gives the outcome (plurality elimination; a tie or no votes
eliminates nobody). Rewards, one per row (ours where the abstract is silent):
  - civilians' rows: 1 if the spy was caught, else 0 (the team's outcome; with
    `civilian_vote = "own_vote"` a civilian's vote row instead gets 1 iff its own
    vote named the spy);
  - the spy's rows: 1 if it survived, else 0;
  - a player whose description names its secret word (`description_leaks`) or is
    empty after `parse_description` broke the rules: 0 on both its rows.
Both turns are trained: each player gives two rows of the batch, its describe
response (on the describe prompt) and its vote response (on the vote prompt),
each with the behaviour log-probs it was sampled with. The description is the
open-ended task the paper wants to improve, and the vote is what makes a good
description pay: a civilian gains when its team can tell the spy apart, the spy
when its description blends in; training the vote too keeps the referee improving
with the describers (self-play) instead of a fixed judge.

Grouping (`groups.SUBGROUP`): rows compare only with like rows, across the G/(2N)
games of the same problem: the civilians' describe rows, the spy's describe rows,
the civilians' vote rows and the spy's vote rows are four groups (in this order,
game-major within each: `SUBGROUPS`). A civilian's advantage is thus relative to the
other civilians of the same record, and the spy's to the same spy in other games.

Per-row reports (`Groups.info`, logged as rollout/<name>): spy_B and vote_B (bool: the
row's role and turn; with them rollout/spy_reward, rollout/not_spy_reward, ...),
civilian_voted_spy_B (a civilian's vote named the spy: the civilians' vote accuracy),
spy_survived_B (on the spy's describe rows: survival rate), vote_parsed_B,
leaked_B and described_B (on describe rows: leak rate and valid-description rate),
game_player_Bx2 (game index in the round, player). `evaluate_vs_frozen` plays the
evaluation games against the frozen initial policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from rlvr_jax import distributed, tasks
from rlvr_jax.registry import one_of
from rlvr_jax.rollout import score
from rlvr_jax.rollout.base import ROLLOUTS, RolloutContext, task_evaluator
from rlvr_jax.rollout.groups import SUBGROUP, Groups, stack_rows
from rlvr_jax.sampling import SamplingParams
from rlvr_jax.tasks.base import Problem
from rlvr_jax.tasks.options import resolve_options
from rlvr_jax.tasks.spy import parse_description, parse_vote, player_prompt, score_game, vote_prompt
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt

CIVILIAN_VOTE = ("outcome", "own_vote")
# Sub-groups of a requested group, in row order: (is spy, is vote turn).
SUBGROUPS = ((False, False), (True, False), (False, True), (True, True))


def player_rewards(
    problem: Problem,
    votes: Sequence[int | None],
    descriptions: Sequence[str],
    civilian_vote: str = "outcome",
) -> dict:
    """The rewards of one game's rows (module doc), from its votes and descriptions.

    Args:
      problem: the game (metadata: num_players, spy_index, the words).
      votes: per player, the 0-based vote (None: no valid vote).
      descriptions: per player, the describe response.
      civilian_vote: "outcome" (a civilian's vote row gets the team's outcome) or
        "own_vote" (1 iff its own vote named the spy).
    Returns:
      dict with "describe" and "vote" ([N] float rewards), "valid" ([N] bool: the
      description is non-empty and names no secret word) and "outcome" (`score_game`).
    """
    if civilian_vote not in CIVILIAN_VOTE:
        raise ValueError(f"civilian_vote = {civilian_vote!r}; valid: {', '.join(CIVILIAN_VOTE)}")
    out = score_game(problem, votes, descriptions)
    spy = out["spy_index"]
    valid = np.array(
        [bool(parse_description(d)) and not leak
         for d, leak in zip(descriptions, out["leaked"], strict=True)]
    )  # fmt: skip
    describe = np.where(valid, np.asarray(out["rewards"], np.float64), 0.0)
    vote = describe.copy()
    if civilian_vote == "own_vote":
        civ = np.arange(len(valid)) != spy
        vote[civ] = (np.asarray(out["voted_spy"]) & valid)[civ]
    return {"describe": describe, "vote": vote, "valid": valid, "outcome": out}


def _sample(sampler, tokenizer, texts, params, key, state=None):
    """The sampler's Rollout on the chat-rendered texts and each row's decoded response."""
    prompts = [encode_prompt(tokenizer, t) for t in texts]
    ro = sampler.sample(prompts, params, key, state=state)
    stops = tokenizer.stop_ids
    out = [tokenizer.decode(cut_at_stop(ro.sampled_tokens(r), stops)) for r in range(len(texts))]
    return ro, out


def _mixed(sampler, tokenizer, texts, params, key, spy_rows, states):
    """Texts sampled by two policies: `states` = (civilians' state, spy's state)."""
    out = [""] * len(texts)
    for k, (rows, state) in enumerate(zip((~spy_rows, spy_rows), states, strict=True)):
        idx = np.flatnonzero(rows)
        if idx.size:
            sub = [texts[i] for i in idx]
            _, got = _sample(sampler, tokenizer, sub, params, jax.random.fold_in(key, k), state)
            for i, t in zip(idx, got, strict=True):
                out[i] = t
    return out


def _layout(problems: Sequence[Problem]):
    """(game, player) of every row of `problems`' games, game-major; the spy flags."""
    gp = [(g, p) for g, prob in enumerate(problems) for p in range(prob.metadata["num_players"])]
    spy = np.array([p == problems[g].metadata["spy_index"] for g, p in gp])
    return gp, spy


def _check(c) -> None:
    """The vote rule, the task, and whole games per group."""
    one_of("rollout.self_play.civilian_vote", c.rollout.self_play.civilian_vote, CIVILIAN_VOTE)
    if c.task.name != "spy_describe":
        raise ValueError(
            f"config.rollout.name = 'self_play' plays 'who is the spy' games: needs "
            f"config.task.name = 'spy_describe', got {c.task.name!r}"
        )
    domain = c.model.domain if c.model.source == "warm_start" else ""
    players = tasks.get(c.task.name, **resolve_options(c.task.options, c.task.name, domain))
    turns = 2 * players.num_players  # a game is N players x (describe, vote)
    if c.data.group_size % turns:
        raise ValueError(
            f"config.data.group_size = {c.data.group_size} must be a multiple of {turns} "
            f"for config.rollout.name = 'self_play' (whole games of "
            f"{players.num_players} players x 2 turns)"
        )


@ROLLOUTS.register("self_play", check=_check, civilian_vote="outcome")
def self_play(ctx: RolloutContext, *, civilian_vote) -> Groups:
    """SpyRL's games: describe, vote, role rewards, role groups (module doc)."""
    req, tok = ctx.request, ctx.tokenizer
    if req.prefixes is not None:
        raise ValueError("config.rollout.name = 'self_play' cannot continue prefixes (PAIR)")
    games, game_group = [], []
    for g, (problem, count) in enumerate(zip(req.problems, req.counts, strict=True)):
        n = problem.metadata.get("num_players") if isinstance(problem.metadata, dict) else None
        if n is None or "spy_index" not in problem.metadata:
            raise ValueError(
                f"config.rollout.name = 'self_play' plays 'who is the spy' games; problem "
                f"{problem.id!r} is not one (config.task.name = 'spy_describe')"
            )
        k = -(-int(count) // (2 * n))  # whole games; a partial group keeps its first rows
        games += [problem] * k
        game_group += [g] * k
    gp, spy = _layout(games)
    k_describe, k_vote = jax.random.split(ctx.key)
    params = ctx.params()
    texts = [player_prompt(games[g], p) for g, p in gp]
    ro_d, described = _sample(ctx.sampler, tok, texts, params, k_describe)
    by_game = [[described[r] for r, (g2, _) in enumerate(gp) if g2 == g] for g in range(len(games))]
    texts = [vote_prompt(games[g], by_game[g], p) for g, p in gp]
    ro_v, voted = _sample(ctx.sampler, tok, texts, params, k_vote)
    votes = [parse_vote(voted[r], games[g].metadata["num_players"]) for r, (g, _) in enumerate(gp)]
    results = []
    for g, problem in enumerate(games):
        rows = [r for r, (g2, _) in enumerate(gp) if g2 == g]
        results.append(player_rewards(problem, [votes[r] for r in rows], by_game[g], civilian_vote))
    out = []
    for g in range(len(req.problems)):  # rows of requested group g: its games, by sub-group
        mine = [r for r, (game, _) in enumerate(gp) if game_group[game] == g]
        start = len(out)
        for sub, (is_spy, is_vote) in enumerate(SUBGROUPS):
            for r in (r for r in mine if spy[r] == is_spy):
                game, p = gp[r]
                res = results[game]
                ro = ro_v if is_vote else ro_d
                reward = float(res["vote" if is_vote else "describe"][p])
                nan = np.float32(np.nan)
                civ_vote = (not is_spy and is_vote) and res["outcome"]["voted_spy"][p]
                info = {
                    SUBGROUP: np.int32(sub),
                    "spy_B": np.bool_(is_spy),
                    "vote_B": np.bool_(is_vote),
                    "civilian_voted_spy_B": np.float32(civ_vote) if not is_spy and is_vote else nan,
                    "spy_survived_B": (
                        np.float32(not res["outcome"]["caught"]) if is_spy and not is_vote else nan
                    ),
                    "vote_parsed_B": np.float32(votes[r] is not None) if is_vote else nan,
                    "leaked_B": np.float32(res["outcome"]["leaked"][p]) if not is_vote else nan,
                    "described_B": np.float32(res["valid"][p]) if not is_vote else nan,
                    "game_player_Bx2": np.array([game, p], np.int32),
                }
                reason = "won" if reward == 1.0 else "lost" if res["valid"][p] else "broke_rules"
                out.append(dict(
                    tokens=ro.tokens[r], attention_mask=ro.attention_mask[r],
                    prompt_mask=ro.prompt_mask[r], response_mask=ro.response_mask[r],
                    behaviour_logps=ro.logps[r], entropy=ro.entropy[r], stopped=ro.stopped[r],
                    reward=reward, correct=reward == 1.0, reason=reason, info=info,
                ))  # fmt: skip
        del out[start + int(req.counts[g]) :]
    group = np.repeat(np.arange(len(req.problems), dtype=np.int32), req.counts)
    groups = stack_rows(out, group, np.ones(len(out), bool), list(req.problems))
    rewards = score.overlong_shaping(
        groups.rewards,
        groups.lengths,
        max_len=ctx.sampling.max_new_tokens,
        cache=ctx.overlong_cache,
        penalty=ctx.overlong_penalty,
    )
    return dataclasses.replace(groups, rewards=np.asarray(rewards, np.float32))


@task_evaluator("spy_describe")
def evaluate_vs_frozen(
    sampler,
    tokenizer,
    problems: Sequence[Problem],
    params: SamplingParams,
    key: jax.Array,
    frozen_state,
    *,
    split_processes: bool = False,
) -> dict[str, float]:
    """Games of the current policy against a frozen opponent (the initial policy).

    Two games per problem: "civilians" (the current policy plays every civilian, the
    frozen one the spy) and "spy" (the current policy plays the spy, the frozen one
    the civilians); two sampler calls per turn (one per policy).

    Args:
      sampler: samples the current policy (state=None) or `frozen_state`.
      tokenizer: renders and decodes.
      problems: the games (spy_describe problems).
      params: sampling parameters (n = 1).
      key: PRNG key.
      frozen_state: `nnx.state` of the opponent.
      split_processes: in a multi-process run each process plays its share of the
        problems (`distributed.process_shard`) and the games' outcomes are gathered,
        so every process returns the statistics over all of them (a collective).
    Returns:
      game/detection_rate (the current civilians caught the frozen spy),
      game/spy_survival (the current spy survived the frozen civilians),
      game/civilian_vote_accuracy (the current civilians' votes that named the spy),
      game/vote_parsed, game/leak_rate and game/description_valid (over the current
      policy's votes and descriptions in both games).
    """
    mine = distributed.my_shard(len(problems), split_processes)
    local = _games_vs_frozen(
        sampler, tokenizer, [problems[i] for i in mine], params, key, frozen_state
    )
    games = distributed.gather_shards(mine, local, len(problems), split_processes)
    stats = {k: [v for g in games for v in g[k]] for k in _GAME_STATS}
    mean = lambda k: float(np.mean(stats[k])) if stats[k] else 0.0  # noqa: E731
    return {
        "game/detection_rate": mean("caught"),
        "game/spy_survival": mean("survived"),
        "game/civilian_vote_accuracy": mean("civ_acc"),
        "game/vote_parsed": mean("parsed"),
        "game/leak_rate": mean("leak"),
        "game/description_valid": mean("valid"),
    }


_GAME_STATS = ("caught", "survived", "civ_acc", "parsed", "leak", "valid")


def _games_vs_frozen(sampler, tokenizer, problems, params, key, frozen_state) -> list[dict]:
    """Per problem: its two games' statistics (lists per `_GAME_STATS` key)."""
    gp, spy = _layout(problems)
    per_game = [{k: [] for k in _GAME_STATS} for _ in problems]
    for arm, current in (("civilians", ~spy), ("spy", spy)):
        states = (None, frozen_state) if arm == "civilians" else (frozen_state, None)
        k_d, k_v = jax.random.split(jax.random.fold_in(key, arm == "spy"))
        texts = [player_prompt(problems[g], p) for g, p in gp]
        described = _mixed(sampler, tokenizer, texts, params, k_d, spy, states)
        by_game = [[described[r] for r, (g2, _) in enumerate(gp) if g2 == g]
                   for g in range(len(problems))]  # fmt: skip
        texts = [vote_prompt(problems[g], by_game[g], p) for g, p in gp]
        voted = _mixed(sampler, tokenizer, texts, params, k_v, spy, states)
        for g, problem in enumerate(problems):
            stats = per_game[g]
            rows = [r for r, (g2, _) in enumerate(gp) if g2 == g]
            votes = [parse_vote(voted[r], problem.metadata["num_players"]) for r in rows]
            res = player_rewards(problem, votes, by_game[g])
            out = res["outcome"]
            stats["caught" if arm == "civilians" else "survived"].append(
                out["caught"] if arm == "civilians" else not out["caught"]
            )
            for i, r in enumerate(rows):
                if not current[r]:
                    continue
                stats["parsed"].append(votes[i] is not None)
                stats["leak"].append(out["leaked"][i])
                stats["valid"].append(res["valid"][i])
                if arm == "civilians":
                    stats["civ_acc"].append(out["voted_spy"][i])
    return per_game
