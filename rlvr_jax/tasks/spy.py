"""The "who is the spy" game: a self-play description-and-vote game with a verifiable outcome.

Each game has a civilian record and a spy record: fictional things of one kind
(creature, plant or town) whose attributes agree except in `num_differences`
of them, each named by a secret word. Every player sees a record and its word
(civilians the civilian one, the spy the spy one: asymmetric information),
writes a one-line description without naming the word, then reads all
descriptions and votes. Because the spy is fixed in advance, the vote outcome
is a verifiable reward (`score_game`).

Player indices are 0-based in the API (`player`, `voter`, `spy_index`,
votes) and 1-based in the text the players see ("Player 3", "Vote: 3").

As a plain verifiable task, `problem()` is one civilian's vote: the prompt
shows that civilian's record and reference descriptions of every player (each
names a few attribute values; the spy's names one that differs), and
`verify` checks the vote against the true spy. The civilian's describe-turn
prompt and its reference description are in the metadata.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from rlvr_jax.tasks import register
from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    MAX_RESPONSE_CHARS,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
)

# kind -> attribute -> values. Values are distinct across a kind's attributes,
# so "size small" can never be read as another attribute's value.
_KINDS: dict[str, dict[str, tuple[str, ...]]] = {
    "creature": {
        "color": ("red", "blue", "green", "yellow", "white", "black"),
        "size": ("tiny", "small", "large", "huge"),
        "covering": ("fur", "scales", "feathers", "shell"),
        "habitat": ("forest", "desert", "river", "mountain", "cave", "swamp"),
        "diet": ("fruit", "fish", "insects", "seeds", "leaves"),
        "sound": ("clicks", "whistles", "roars", "hums"),
    },
    "plant": {
        "color": ("red", "blue", "purple", "yellow", "white", "orange"),
        "height": ("short", "tall", "low", "giant"),
        "leaf": ("round", "needle", "heart", "spiky"),
        "soil": ("sand", "clay", "peat", "rock"),
        "season": ("spring", "summer", "autumn", "winter"),
        "smell": ("sweet", "sour", "spicy", "bitter"),
    },
    "town": {
        "climate": ("cold", "hot", "wet", "dry"),
        "terrain": ("hills", "plains", "coast", "valley", "island"),
        "trade": ("wool", "salt", "iron", "glass", "grain"),
        "walls": ("stone", "wood", "brick", "mud"),
        "size": ("village", "city", "hamlet", "port"),
        "festival": ("music", "lanterns", "horses", "masks"),
    },
}
_MENTIONED = 3  # attribute values in each reference description
_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
MAX_DESCRIPTION_CHARS = 160
_VOTE_RE = re.compile(r"vote\s*[:=]\s*(?:player\s*)?([0-9]{1,6})(?![0-9])", re.IGNORECASE)
_DESCRIPTION_RE = re.compile(r"description\s*[:=][ \t]*([^\n]*)", re.IGNORECASE)


def parse_vote(text: str, num_players: int | None = None) -> int | None:
    """The voted player of a vote response ("Vote: 3" or "Vote: player 3"), 0-based.

    Bounded: reads only the last MAX_RESPONSE_CHARS characters, ASCII digits only.

    Args:
      text: the response; the last "Vote:" line counts.
      num_players: if given, a vote outside 1..num_players gives None.
    Returns:
      The 0-based player index, or None when there is no valid vote.
    """
    if not isinstance(text, str):
        return None
    matches = _VOTE_RE.findall(text[-MAX_RESPONSE_CHARS:])
    if not matches:
        return None
    number = int(matches[-1])
    if number < 1 or (num_players is not None and number > num_players):
        return None
    return number - 1


def parse_description(text: str) -> str:
    """The one-line description of a describe-turn response, cleaned and capped.

    The last "Description: ..." line, else the first non-empty line; newlines
    and control characters removed.

    Args:
      text: the describe-turn response (its first MAX_RESPONSE_CHARS characters are read).
    Returns:
      The description, at most MAX_DESCRIPTION_CHARS characters ("" if none).
    """
    if not isinstance(text, str):
        return ""
    head = text[:MAX_RESPONSE_CHARS]
    matches = _DESCRIPTION_RE.findall(head)
    line = matches[-1] if matches else next((s for s in head.splitlines() if s.strip()), "")
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    return " ".join(line.split())[:MAX_DESCRIPTION_CHARS]


def description_leaks(problem: Problem, description: str, player: int | None = None) -> bool:
    """Whether a description names a secret word (a rule violation: MALFORMED).

    Matches the word case-insensitively at a word start, also spelled out with
    up to two separators between letters ("D-o-r-v-i-k"); suffixes still count.

    Args:
      problem: the game.
      description: the player's text (only its first MAX_RESPONSE_CHARS characters
        are read, the part `parse_description` reads too).
      player: check only this player's own word; None checks both words.
    Returns:
      True if the text names a checked word.
    """
    if not isinstance(description, str):
        return False
    meta = problem.metadata
    if player is None:
        words = [meta["civilian_word"], meta["spy_word"]]
    else:
        words = [meta["spy_word"] if player == meta["spy_index"] else meta["civilian_word"]]
    return _names_any(words, description)


def _names_any(words: Sequence[str], text: str) -> bool:
    text = text[:MAX_RESPONSE_CHARS].lower()
    for word in words:
        # Separator classes exclude letters, so the regex cannot backtrack much.
        pattern = "[^a-z0-9]{0,2}".join(re.escape(c) for c in word.lower())
        if re.search(f"(?<![a-z]){pattern}", text):
            return True
    return False


def _header(problem: Problem, player: int) -> str:
    meta = problem.metadata
    spy = player == meta["spy_index"]
    word = meta["spy_word"] if spy else meta["civilian_word"]
    record = meta["spy_record"] if spy else meta["civilian_record"]
    n = meta["num_players"]
    facts = ", ".join(f"{a} {v}" for a, v in record.items())
    text = (
        f"Who is the spy? Players 1-{n} each got a secret word. "
        "One player, the spy, got a different word.\n"
        f"Your secret word is {word}: a {meta['kind']} with {facts}.\n"
    )
    if spy and meta["spy_knows"]:
        text += "You are the spy: the others have a different word. Blend in.\n"
    return text


def player_prompt(problem: Problem, player: int) -> str:
    """The describe-turn prompt of `player` (0-based).

    With spy_knows=False, the spy's prompt differs from a civilian's only in the
    word and record; with spy_knows=True it also tells the spy its role.

    Args:
      problem: the game.
      player: 0-based player index.
    Returns:
      The prompt text; it asks for a line "Description: <text>".
    """
    return (
        _header(problem, player) + "Describe your word in one line without naming it.\n"
        'End with a line "Description: <text>".\n'
    )


def vote_prompt(problem: Problem, descriptions: Sequence[str], voter: int) -> str:
    """The vote-turn prompt of `voter` (0-based) given every player's describe response.

    Each description goes through `parse_description`; one that names a secret
    word is shown as "(removed: named a secret word)".

    Args:
      problem: the game.
      descriptions: describe-turn responses per player (missing ones show empty).
      voter: 0-based index of the voting player.
    Returns:
      The prompt text; it asks for a line "Vote: <player number>" (1-based).
    """
    lines = []
    for i in range(problem.metadata["num_players"]):
        raw = descriptions[i] if i < len(descriptions) else ""
        text = parse_description(raw)
        if description_leaks(problem, text):
            text = "(removed: named a secret word)"
        lines.append(f"Player {i + 1}: {text}\n")
    return (
        _header(problem, voter)
        + f"You are player {voter + 1}. Descriptions:\n"
        + "".join(lines)
        + 'Which player is the spy? End with a line "Vote: <player number>".\n'
    )


def score_game(
    problem: Problem, votes: Sequence[int | None], descriptions: Sequence[str] | None = None
) -> dict[str, Any]:
    """The verifiable outcome of one game.

    Rules: each player casts one vote (0-based target); None, an out-of-range
    target or a vote for oneself abstains. The player with the most votes is
    eliminated; a tie for the most votes, or no votes at all, eliminates nobody
    (the spy survives). The spy is caught iff it is eliminated. Rewards:
    civilians 1.0 if the spy is caught else 0.0; the spy 1.0 if not caught else
    0.0. With `descriptions`, a player whose description names its secret word
    broke the rules and gets 0.0.

    Args:
      problem: the game.
      votes: per player (len num_players; missing entries abstain).
      descriptions: optional describe responses per player, for the leak rule.
    Returns:
      dict with "caught" (bool), "eliminated" (int | None), "tally" (votes per
      player), "rewards" (per player), "voted_spy" (per voter: named the spy),
      "leaked" (per player), "spy_index".
    """
    n, spy = problem.metadata["num_players"], problem.metadata["spy_index"]
    valid = []
    for voter in range(n):
        v = votes[voter] if voter < len(votes) else None
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n and v != voter
        valid.append(v if ok else None)
    tally = [sum(v == p for v in valid) for p in range(n)]
    top = max(tally)
    eliminated = tally.index(top) if top > 0 and tally.count(top) == 1 else None
    caught = eliminated == spy
    rewards = [float(caught != (p == spy)) for p in range(n)]
    leaked = [False] * n
    if descriptions is not None:
        for p in range(min(n, len(descriptions))):
            leaked[p] = description_leaks(problem, descriptions[p], player=p)
            rewards[p] = 0.0 if leaked[p] else rewards[p]
    return {
        "caught": caught,
        "eliminated": eliminated,
        "tally": tally,
        "rewards": rewards,
        "voted_spy": [v == spy for v in valid],
        "leaked": leaked,
        "spy_index": spy,
    }


def turn_examples(problems: Sequence[Problem], seed: int = 0) -> list[tuple[str, str]]:
    """SFT (prompt, target) pairs of both turns of the game, two per problem.

    A describe turn of one player (drawn from `seed`, the spy included) with its
    reference description, and the problem's civilian vote with its reference
    solution: a base that plays both turns of a self-play game.
    """
    rng = np.random.default_rng(seed)
    out = []
    for p in problems:
        i = int(rng.integers(p.metadata["num_players"]))
        out.append((player_prompt(p, i), p.metadata["descriptions"][i]))
        out.append((p.prompt, p.solution))
    return out


def _describe(record: dict[str, str], attrs: Sequence[str]) -> str:
    return ", ".join(f"{a} {record[a]}" for a in attrs)


def _word(rng) -> str:
    """A pronounceable fictional secret word of 2-3 consonant-vowel syllables."""
    n = int(rng.integers(2, 4))
    return "".join(_ONSETS[rng.integers(14)] + _VOWELS[rng.integers(5)] for _ in range(n)).title()


@register
@dataclasses.dataclass(frozen=True)
class SpyDescribe(Task):
    """The "who is the spy" game; as a plain task, a civilian's vote on reference descriptions.

    Attributes:
      num_players: players in a game (3..8), one of them the spy.
      num_attributes: attributes per record (4..6).
      num_differences: attributes in which the spy record differs (1..2).
      spy_knows: whether the spy's prompts tell it that it is the spy.
      seed: task seed.
    """

    name: ClassVar[str] = "spy_describe"
    num_players: int = 4
    num_attributes: int = 5
    num_differences: int = 1
    spy_knows: bool = False
    seed: int = 0

    def __post_init__(self):
        if not 3 <= self.num_players <= 8:
            raise ValueError(f"num_players must be in 3..8, got {self.num_players}")
        if not 4 <= self.num_attributes <= 6:
            raise ValueError(f"num_attributes must be in 4..6, got {self.num_attributes}")
        if not 1 <= self.num_differences <= 2:
            raise ValueError(f"num_differences must be in 1..2, got {self.num_differences}")

    def problem(self, index: int, split: str = "train") -> Problem:
        rng = self.rng(index, split)
        kind = str(rng.choice(list(_KINDS)))
        schema = _KINDS[kind]
        attrs = sorted(str(a) for a in rng.choice(list(schema), self.num_attributes, False))
        civilian = {a: str(rng.choice(schema[a])) for a in attrs}
        differing = sorted(str(a) for a in rng.choice(attrs, self.num_differences, False))
        spy_record = dict(civilian)
        for a in differing:
            spy_record[a] = str(rng.choice([v for v in schema[a] if v != civilian[a]]))
        n = self.num_players
        spy = int(rng.integers(n))
        voter = int(rng.choice([p for p in range(n) if p != spy]))
        # Reference descriptions name a few values; the spy's names a differing one,
        # so a civilian who compares them with its own record finds the spy.
        shown = [[str(a) for a in rng.choice(attrs, _MENTIONED, replace=False)] for _ in range(n)]
        if not set(shown[spy]) & set(differing):
            shown[spy][int(rng.integers(_MENTIONED))] = str(rng.choice(differing))
        described = [_describe(spy_record if p == spy else civilian, shown[p]) for p in range(n)]
        words = [_word(rng), _word(rng)]
        # Distinct words that never leak by accident: neither a prefix of the
        # other nor found in any reference description.
        while (
            words[0].startswith(words[1])
            or words[1].startswith(words[0])
            or any(_names_any(words, d) for d in described)
        ):
            words = [_word(rng), _word(rng)]
        metadata = {
            "kind": kind,
            "civilian_word": words[0],
            "spy_word": words[1],
            "civilian_record": civilian,
            "spy_record": spy_record,
            "differing": differing,
            "spy_index": spy,
            "num_players": n,
            "spy_knows": self.spy_knows,
            "voter": voter,
            "descriptions": [f"Description: {d}\n" for d in described],
        }
        problem = Problem(self.problem_id(index, split), "", str(spy + 1), "", metadata)
        attr = next(a for a in shown[spy] if a in differing)
        solution = (
            f"Player {spy + 1} said {attr} {spy_record[attr]}, "
            f"but mine is {attr} {civilian[attr]}.\n"
            f"Vote: {spy + 1}\n"
        )
        metadata["describe_prompt"] = player_prompt(problem, voter)
        metadata["describe_solution"] = metadata["descriptions"][voter]
        prompt = vote_prompt(problem, metadata["descriptions"], voter)
        return dataclasses.replace(problem, prompt=prompt, solution=solution)

    def verify(self, problem: Problem, response: str) -> Verdict:
        """CORRECT iff the response's last "Vote: k" names the spy (k is 1-based)."""
        vote = parse_vote(response, problem.metadata["num_players"])
        if vote is None:
            return Verdict(0.0, MALFORMED, None, "no valid 'Vote: <player number>' line")
        if vote == problem.metadata["spy_index"]:
            return Verdict(1.0, CORRECT, str(vote + 1))
        return Verdict(0.0, WRONG_ANSWER, str(vote + 1), f"the spy is player {problem.answer}")
