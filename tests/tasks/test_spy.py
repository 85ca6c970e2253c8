"""spy_describe: game generation, asymmetric prompts, vote parsing, scoring, the verifier."""

import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import CORRECT, MALFORMED, REASONS, WRONG_ANSWER
from rlvr_jax.tasks.spy import (
    description_leaks,
    parse_description,
    parse_vote,
    player_prompt,
    score_game,
    vote_prompt,
)

ADVERSARIAL = [
    "9**9**9**9",
    "10^100000",
    "Vote: " + "9" * 100_000,
    "x" * 100_000,
    "(" * 100_000,
    "((1+2",
    "Vote: ٣",
    "Vote: ３",
    "__import__('os').system('x')",
    "\x00" * 1000,
    "Vote:" * 20_000,
    "Description:" * 20_000,
    "a-" * 50_000,
    "",
]
ADVERSARIAL += ["Answer: " + s for s in ADVERSARIAL]


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.1, f"{elapsed * 1000:.1f} ms"
    return out


def _game(spy_index=2, num_players=4, **options):
    """A generated game with the spy moved to `spy_index` (for hand-computed votes)."""
    p = tasks.get("spy_describe", num_players=num_players, **options).problem(0)
    return dataclasses.replace(p, metadata={**p.metadata, "spy_index": spy_index})


# ------------------------------------------------------------------ generation
def test_registry_and_determinism():
    task = tasks.get("spy_describe", seed=1)
    assert task.problem(3) == tasks.get("spy_describe", seed=1).problem(3)
    assert task.problem(3, "train") != task.problem(3, "test")
    assert task.problem(3) != tasks.get("spy_describe", seed=2).problem(3)
    train = {p.prompt for p in task.problems(200, "train")}
    assert not train & {p.prompt for p in task.problems(200, "test")}
    with pytest.raises(ValueError, match="valid"):
        tasks.get("spy_describe", players=4)
    for bad in ({"num_players": 2}, {"num_attributes": 7}, {"num_differences": 3}):
        with pytest.raises(ValueError):
            tasks.get("spy_describe", **bad)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"num_players": 3, "num_differences": 2},
        {"num_players": 8, "num_attributes": 4},
        {"num_attributes": 6, "spy_knows": True},
    ],
)
def test_reference_games(options):
    task = tasks.get("spy_describe", **options)
    n = task.num_players
    for p in task.problems(150, "validation"):
        meta = p.metadata
        assert task.verify(p, p.solution).reason == CORRECT
        assert p.answer == str(meta["spy_index"] + 1)
        civ, spy = meta["civilian_record"], meta["spy_record"]
        assert len(civ) == task.num_attributes and civ.keys() == spy.keys()
        assert sorted(a for a in civ if civ[a] != spy[a]) == meta["differing"]
        assert len(meta["differing"]) == task.num_differences
        assert meta["civilian_word"] != meta["spy_word"]
        assert meta["voter"] != meta["spy_index"] and len(meta["descriptions"]) == n
        assert not any(description_leaks(p, d) for d in meta["descriptions"])
        assert meta["describe_prompt"] == player_prompt(p, meta["voter"])
        assert p.prompt == vote_prompt(p, meta["descriptions"], meta["voter"])
        # Reference votes by the whole table catch the spy.
        assert score_game(p, [meta["spy_index"]] * n)["caught"]


def test_difficulty_knobs_change_the_game():
    for k in (1, 2):
        for p in tasks.get("spy_describe", num_differences=k).problems(20):
            assert len(p.metadata["differing"]) == k
    for n in (3, 8):
        p = tasks.get("spy_describe", num_players=n).problem(0)
        assert f"Players 1-{n}" in p.prompt and f"Player {n}:" in p.prompt


# --------------------------------------------------------------------- prompts
@pytest.mark.parametrize("index", range(20))
def test_asymmetric_prompts_differ_only_in_the_record(index):
    p = tasks.get("spy_describe").problem(index)
    meta = p.metadata
    spy = meta["spy_index"]
    prompts = [player_prompt(p, i) for i in range(meta["num_players"])]
    civilians = [prompts[i] for i in range(len(prompts)) if i != spy]
    assert len(set(civilians)) == 1
    civ_lines, spy_lines = civilians[0].splitlines(), prompts[spy].splitlines()
    assert len(civ_lines) == len(spy_lines)
    diff = [i for i, (a, b) in enumerate(zip(civ_lines, spy_lines, strict=True)) if a != b]
    assert diff == [1]
    assert civ_lines[1].startswith(f"Your secret word is {meta['civilian_word']}: a ")
    assert spy_lines[1].startswith(f"Your secret word is {meta['spy_word']}: a ")
    for a in meta["differing"]:
        assert f"{a} {meta['civilian_record'][a]}" in civ_lines[1]
        assert f"{a} {meta['spy_record'][a]}" in spy_lines[1]


def test_spy_knows_tells_only_the_spy():
    p = tasks.get("spy_describe", spy_knows=True).problem(0)
    spy = p.metadata["spy_index"]
    for i in range(p.metadata["num_players"]):
        told = "You are the spy" in player_prompt(p, i)
        assert told == (i == spy)
        assert told == ("You are the spy" in vote_prompt(p, [], i))


def test_vote_prompt_literal_and_leak_removal():
    p = _game(spy_index=2)
    word = p.metadata["civilian_word"]
    descriptions = [
        "Description: it is red\nextra",
        f"Description: a {word.lower()}s thing",
        "first line\nsecond line",
    ]
    text = vote_prompt(p, descriptions, voter=0)
    assert "You are player 1. Descriptions:\n" in text
    assert "Player 1: it is red\n" in text
    assert "Player 2: (removed: named a secret word)\n" in text
    assert "Player 3: first line\n" in text
    assert "Player 4: \n" in text
    assert text.endswith('Which player is the spy? End with a line "Vote: <player number>".\n')


# ----------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "text,expected",
    [
        ("Vote: 3", 2),
        ("vote=1", 0),
        ("I think so.\nVote: player 4\n", 3),
        ("Vote: 2\nVote: 3", 2),
        ("Vote: 0", None),
        ("Vote: 5", None),
        ("Vote: 12345678", None),
        ("Vote: ３", None),
        ("Vote: ٣", None),
        ("Vote: Alice", None),
        ("3", None),
        ("", None),
    ],
)
def test_parse_vote(text, expected):
    assert parse_vote(text, num_players=4) == expected


def test_parse_vote_without_range_and_parse_description():
    assert parse_vote("Vote: 9") == 8
    assert parse_vote(None) is None
    assert parse_description("Description: small\tand\x00green \nVote: 1") == "small and green"
    assert parse_description("\n\n  hello  world\nmore") == "hello world"
    assert len(parse_description("Description: " + "a" * 1000)) == 160
    assert parse_description(None) == ""


def test_description_leaks():
    p = _game()
    civ, spy = p.metadata["civilian_word"], p.metadata["spy_word"]
    assert description_leaks(p, f"It is a {civ}.")
    assert description_leaks(p, f"many {civ.upper()}S here")
    assert description_leaks(p, "-".join(civ))
    assert description_leaks(p, " ".join(spy))
    assert not description_leaks(p, f"x{civ.lower()}")
    assert not description_leaks(p, "green and small")
    assert description_leaks(p, f"a {spy}", player=2)
    assert not description_leaks(p, f"a {spy}", player=0)
    assert description_leaks(p, f"a {civ}", player=0)


# --------------------------------------------------------------------- scoring
@pytest.mark.parametrize(
    "votes,caught,eliminated,tally",
    [
        ([2, 2, 0, 2], True, 2, [1, 0, 3, 0]),  # civilians agree on the spy
        ([2, 2, 0, 0], False, None, [2, 0, 2, 0]),  # tie for most votes: nobody out
        ([1, 0, 1, 1], False, 1, [1, 3, 0, 0]),  # a civilian is eliminated
        ([0, 1, 2, 3], False, None, [0, 0, 0, 0]),  # self-votes abstain
        ([None, 7, -1, True], False, None, [0, 0, 0, 0]),  # invalid votes abstain
        ([2], True, 2, [0, 0, 1, 0]),  # missing votes abstain; one vote is a plurality
        ([], False, None, [0, 0, 0, 0]),  # no votes: the spy survives
    ],
)
def test_score_game_hand_cases(votes, caught, eliminated, tally):
    out = score_game(_game(spy_index=2), votes)
    assert out["caught"] == caught and out["eliminated"] == eliminated and out["tally"] == tally
    civ = 1.0 if caught else 0.0
    assert out["rewards"] == [civ, civ, 1.0 - civ, civ]
    assert out["spy_index"] == 2


def test_score_game_voted_spy_and_leak_penalty():
    p = _game(spy_index=2)
    civ, spy = p.metadata["civilian_word"], p.metadata["spy_word"]
    out = score_game(p, [2, 3, 0, 2], ["fine", f"it is {civ}", f"I am {spy}", "ok"])
    assert out["voted_spy"] == [True, False, False, True]
    assert out["caught"] and out["leaked"] == [False, True, True, False]
    assert out["rewards"] == [1.0, 0.0, 0.0, 1.0]


def test_verify_votes():
    task = tasks.get("spy_describe")
    p = task.problem(4)
    spy = p.metadata["spy_index"]
    other = (spy + 1) % 4
    assert task.verify(p, f"Vote: {spy + 1}").reason == CORRECT
    wrong = task.verify(p, f"Vote: {other + 1}")
    assert wrong.reason == WRONG_ANSWER and wrong.parsed == str(other + 1) and wrong.reward == 0
    assert task.verify(p, "Vote: 9").reason == MALFORMED
    assert task.verify(p, f"Answer: {spy + 1}").reason == MALFORMED


# ------------------------------------------------------------------ robustness
@pytest.mark.parametrize("text", ADVERSARIAL)
def test_adversarial_strings(text):
    task = tasks.get("spy_describe")
    p = task.problem(0)
    assert _timed(task.verify, p, text).reason in REASONS
    assert _timed(parse_vote, text, 4) in (None, 0, 1, 2, 3)
    _timed(description_leaks, p, text)
    assert len(_timed(parse_description, text)) <= 160
    _timed(vote_prompt, p, [text] * 4, 0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_text(text):
    task = tasks.get("spy_describe")
    p = task.problem(1)
    for candidate in (text, "Vote: " + text, "Answer: " + text):
        assert _timed(task.verify, p, candidate).reason in REASONS
        vote = _timed(parse_vote, candidate, 4)
        assert vote is None or 0 <= vote < 4
    assert isinstance(_timed(description_leaks, p, text), bool)
    assert "\n" not in _timed(parse_description, text)
    out = score_game(p, [parse_vote(text, 4)] * 4, [text] * 4)
    assert sum(out["tally"]) <= 4 and all(r in (0.0, 1.0) for r in out["rewards"])


def test_turn_examples_teach_both_turns_of_the_game():
    from rlvr_jax.tasks.spy import turn_examples
    from rlvr_jax.train.warmstart import get_spec

    problems = tasks.get("spy_describe", num_players=3).problems(40)
    ex = turn_examples(problems, seed=0)
    assert len(ex) == 80 and ex == turn_examples(problems, seed=0)
    seats = set()
    for p, (describe, vote) in zip(problems, zip(ex[::2], ex[1::2], strict=True), strict=True):
        assert vote == (p.prompt, p.solution)
        # (civilians' describe prompts are identical: the player is one of them)
        i = [k for k in range(3) if player_prompt(p, k) == describe[0]]
        assert describe[1] in [p.metadata["descriptions"][k] for k in i]
        seats.add(i == [p.metadata["spy_index"]])
    assert seats == {True, False}  # the spy's describe turn is taught too
    spec = get_spec("spy_describe")
    assert spec.sft_examples()[:2] == turn_examples(spec.task().problems(1, "train"), seed=0)
