"""SpyRL's self_play rollout: a game's rewards follow from its votes for every role, rows are
the players' real describe and vote turns, and groups compare like roles across games."""

import dataclasses
import itertools

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr_jax import tasks
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.rl.config import default_config, validate
from rlvr_jax.rollout import ROLLOUTS, Request, RolloutContext, self_play
from rlvr_jax.rollout.groups import SUBGROUP
from rlvr_jax.rollout.self_play import SUBGROUPS, evaluate_vs_frozen, player_rewards
from rlvr_jax.sampling import SamplingParams
from rlvr_jax.tasks.spy import player_prompt, vote_prompt
from rlvr_jax.testing import parity_vote
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt
from tests.rollout.common import TOK, tiny_policy

_logps = nnx.jit(token_logps)


def _game(spy, n=3):
    p = tasks.get("spy_describe", num_players=n).problem(0)
    return dataclasses.replace(p, metadata={**p.metadata, "spy_index": spy})


OK = ["Description: small and red"] * 3  # valid descriptions that name no word

# Hand-worked 3-player games (0-based votes; None abstains): (spy, votes, spy caught).
HAND = [
    (1, [1, 0, 1], True),  # two votes on the spy
    (1, [1, 2, 0], False),  # one vote each: a tie eliminates nobody
    (1, [None, None, 1], True),  # a single vote decides
    (1, [2, 2, 0], False),  # a civilian is eliminated: the spy survives
    (1, [1, 1, 1], True),  # the spy's vote for itself abstains; 2 votes on it
    (0, [None, None, None], False),  # nobody voted
    (2, [2, 2, 1], True),
    (2, [1, 0, 0], False),  # player 0 eliminated (2 votes vs 1)
]


@pytest.mark.parametrize("spy, votes, caught", HAND)
def test_hand_worked_games(spy, votes, caught):
    r = player_rewards(_game(spy), votes, OK)
    want = np.array([float(caught != (p == spy)) for p in range(3)])
    np.testing.assert_array_equal(r["describe"], want)
    np.testing.assert_array_equal(r["vote"], want)
    assert r["outcome"]["caught"] == caught and r["valid"].all()


def _reference(spy, votes):
    """Plurality by counting, written independently of score_game: rewards per player."""
    cast = [v for i, v in enumerate(votes) if v is not None and v != i]
    counts = {p: cast.count(p) for p in set(cast)}
    top = max(counts.values(), default=0)
    leaders = [p for p, c in counts.items() if c == top]
    caught = top > 0 and leaders == [spy]
    return np.array([float(caught) if p != spy else float(not caught) for p in range(3)])


def test_rewards_follow_from_the_votes_for_every_role_assignment():
    """All 3 spy seats x 4^3 vote profiles: civilians win iff the spy is caught, the spy
    otherwise; the vote row of a civilian under own_vote wins iff it named the spy."""
    for spy in range(3):
        game = _game(spy)
        for votes in itertools.product([None, 0, 1, 2], repeat=3):
            want = _reference(spy, list(votes))
            for mode in ("outcome", "own_vote"):
                r = player_rewards(game, list(votes), OK, civilian_vote=mode)
                np.testing.assert_array_equal(r["describe"], want)
                vote = want.copy()
                if mode == "own_vote":
                    vote = np.array([float(votes[p] == spy) for p in range(3)])
                    vote[spy] = want[spy]
                np.testing.assert_array_equal(r["vote"], vote, err_msg=f"{spy} {votes} {mode}")
            assert want.sum() in (1.0, 2.0)  # exactly one side wins


def test_a_leak_or_an_empty_description_zeroes_both_rows_of_that_player():
    game = _game(1)
    civ, spy_word = game.metadata["civilian_word"], game.metadata["spy_word"]
    votes = [1, 0, 1]  # spy caught
    r = player_rewards(game, votes, [f"Description: like {civ}", "", OK[0]])
    np.testing.assert_array_equal(r["valid"], [False, False, True])
    np.testing.assert_array_equal(r["describe"], [0, 0, 1])
    np.testing.assert_array_equal(r["vote"], [0, 0, 1])
    votes = [2, 2, 0]  # spy survives, but named its own word
    r = player_rewards(game, votes, [OK[0], f"Description: {spy_word}!", OK[0]])
    np.testing.assert_array_equal(r["describe"], [0, 0, 0])
    with pytest.raises(ValueError, match="civilian_vote"):
        player_rewards(game, votes, OK, civilian_vote="majority")


# ------------------------------------------------------------------------ the rollout
@pytest.fixture(scope="module")
def played():
    model, sampler = tiny_policy(max_position_embeddings=1024)
    task = tasks.get("spy_describe", num_players=3)
    params = SamplingParams(max_new_tokens=8, stop_token_ids=TOK.stop_ids)
    req = Request(task.problems(2, "train"), np.array([12, 12]))  # 2 games of 3 per problem
    ctx = RolloutContext(sampler, TOK, task, nnx.state(model), params, jax.random.PRNGKey(3), req)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(self_play, "parse_vote", parity_vote)
        out = ROLLOUTS.get("self_play").fn(ctx, civilian_vote="outcome")
    return model, ctx, out


def _response(out, r):
    return TOK.decode(cut_at_stop(out.tokens[r][out.response_mask[r]].tolist(), TOK.stop_ids))


def test_rows_are_each_players_describe_and_vote_turns_rewarded_by_the_game(played):
    model, ctx, out = played
    assert len(out.group) == 24 and out.valid.all()
    np.testing.assert_array_equal(out.group, np.repeat([0, 1], 12))
    gp = out.info["game_player_Bx2"]
    vote = out.info["vote_B"]
    games = {}  # game -> (problem, {player: description}, {player: vote text})
    for r in range(24):
        g, p = gp[r]
        problem = out.problems[out.group[r]]
        games.setdefault(g, (problem, {}, {}))[2 if vote[r] else 1][p] = _response(out, r)
    assert len(games) == 4
    for r in range(24):  # every row's context is that player's own prompt of that game
        g, p = gp[r]
        problem, described, _ = games[g]
        assert out.info["spy_B"][r] == (p == problem.metadata["spy_index"])
        text = player_prompt(problem, p)
        if vote[r]:
            text = vote_prompt(problem, [described[i] for i in range(3)], p)
        prompt = out.tokens[r][out.prompt_mask[r]].tolist()
        assert prompt == encode_prompt(TOK, text)
    for g, (problem, described, voted) in games.items():
        votes = [parity_vote(voted[p], 3) for p in range(3)]
        want = player_rewards(problem, votes, [described[p] for p in range(3)])
        for r in np.flatnonzero(gp[:, 0] == g):
            turn = "vote" if vote[r] else "describe"
            assert out.rewards[r] == want[turn][gp[r, 1]]
    # mu is the policy's: teacher forcing reproduces the sampled tokens' log-probs.
    m = out.response_mask
    forced = np.asarray(_logps(model, out.tokens, out.attention_mask))
    np.testing.assert_allclose(out.behaviour_logps[m], forced[m], atol=2e-4)
    # The games had outcomes both ways, so the roles' rewards are not constant.
    assert len(set(out.rewards.tolist())) == 2


def test_groups_compare_like_roles_across_the_games_of_a_problem(played):
    _, _, out = played
    sub = out.info[SUBGROUP]
    split = out.split_subgroups()
    assert SUBGROUP not in split.info and split.num_groups == 8
    spy, vote, gp = out.info["spy_B"], out.info["vote_B"], out.info["game_player_Bx2"]
    for g in range(8):
        rows = np.flatnonzero(split.group == g)
        assert np.ptp(rows) == len(rows) - 1  # contiguous
        (s,) = set(sub[rows].tolist())
        assert SUBGROUPS[s] == (spy[rows[0]], vote[rows[0]])
        assert (spy[rows] == spy[rows[0]]).all() and (vote[rows] == vote[rows[0]]).all()
        assert len(set(out.group[rows].tolist())) == 1  # one problem's games
        assert len(set(gp[rows, 0].tolist())) == 2  # across its 2 games
        assert len(rows) == (2 if spy[rows[0]] else 4)  # 2 games x (1 spy | 2 civilians)
        assert split.problems[g] is out.problems[out.group[rows[0]]]


def test_a_padded_round_keeps_the_first_rows_of_whole_games(played, monkeypatch):
    """The select stage pads a round with copies of its first prompt (dropped later)."""
    _, ctx, _ = played
    monkeypatch.setattr(self_play, "parse_vote", parity_vote)
    counts = np.array([12, 12, 8])
    padded = Request([*ctx.request.problems, ctx.request.problems[0]], counts)
    got = ROLLOUTS.get("self_play").fn(
        dataclasses.replace(ctx, request=padded), civilian_vote="outcome"
    )
    assert len(got.group) == 32
    np.testing.assert_array_equal(got.group, np.repeat([0, 1, 2], counts))
    np.testing.assert_array_equal(
        got.info[SUBGROUP][:24], np.tile(np.repeat([0, 1, 2, 3], [4, 2, 4, 2]), 2)
    )
    # The padding group: 2 games' rows (12) cut to its 8: the civilians' and the spy's
    # describe turns and the first 2 civilian votes.
    np.testing.assert_array_equal(got.info[SUBGROUP][24:], [0] * 4 + [1] * 2 + [2] * 2)


def test_self_play_refuses_prefixes_and_other_tasks(played):
    _, ctx, _ = played
    pre = dataclasses.replace(ctx.request, prefixes=[None] * 24)
    with pytest.raises(ValueError, match="cannot continue prefixes"):
        ROLLOUTS.get("self_play").fn(dataclasses.replace(ctx, request=pre), civilian_vote="outcome")
    other = Request(tasks.get("arithmetic").problems(1, "train"), np.array([6]))
    with pytest.raises(ValueError, match="spy_describe"):
        ROLLOUTS.get("self_play").fn(dataclasses.replace(ctx, request=other), civilian_vote="x")


def test_config_checks_name_the_field():
    c = default_config()
    c.rollout.name = "self_play"
    with pytest.raises(ValueError, match="config.task.name = 'spy_describe'"):
        validate(c)
    c.task.name = "spy_describe"
    c.rollout.self_play.civilian_vote = "majority"
    with pytest.raises(ValueError, match="config.rollout.self_play.civilian_vote"):
        validate(c)
    c.rollout.self_play.civilian_vote = "outcome"
    c.task.options = '{"num_players": 4}'
    with pytest.raises(ValueError, match="group_size = 12 must be a multiple of 8"):
        c.data.group_size = 12
        validate(c)


def test_evaluation_puts_the_frozen_policy_in_the_other_role(monkeypatch):
    """Scripted policies: the current one describes plainly and votes for the spy; the
    frozen one leaks its word and votes for player 1. Against it, the current civilians
    always catch the frozen spy (which also broke the rules), and the current spy survives
    unless it sits in seat 1."""
    problems = tasks.get("spy_describe", num_players=3).problems(12, "test")

    def fake_sample(sampler, tokenizer, texts, params, key, state=None):
        out = []
        for t in texts:
            vote_turn = "Vote:" in t
            word = t.split("Your secret word is ")[1].split(":")[0]
            if state is None:  # the current policy: votes for the spy (reads the metadata)
                meta = next(
                    p.metadata
                    for p in problems
                    if word in (p.metadata["civilian_word"], p.metadata["spy_word"])
                )
                out.append(f"Vote: {meta['spy_index'] + 1}" if vote_turn else "Description: big")
            else:
                out.append("Vote: 1" if vote_turn else f"Description: {word}")
        return None, out

    monkeypatch.setattr(self_play, "_sample", fake_sample)
    params = SamplingParams(max_new_tokens=4)
    m = evaluate_vs_frozen(None, TOK, problems, params, jax.random.PRNGKey(0), "frozen")
    seat1 = np.mean([p.metadata["spy_index"] == 0 for p in problems])
    assert m["game/detection_rate"] == 1.0 and m["game/civilian_vote_accuracy"] == 1.0
    # The frozen civilians (2) vote for player 1: the current spy is caught iff it is player 1.
    assert m["game/spy_survival"] == pytest.approx(1 - seat1)
    assert m["game/leak_rate"] == 0.0 and m["game/description_valid"] == 1.0
    assert m["game/vote_parsed"] == 1.0
