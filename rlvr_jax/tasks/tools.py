"""Multi-turn tool use: look facts up in a hidden generated table, compute, answer.

Each problem hides a fact table ("population of Varno = 412") and asks a
question that needs `num_lookups` lookups and arithmetic. The policy acts in
turns; each turn ends with one tool call on its own line or with the answer:

    <call>lookup(Varno, population)</call>      -> <result>412</result>
    <call>calc(412 + 77)</call>                 -> <result>489</result>
    Answer: 489                                 -> episode over, scored

`ToolEnv.step(turn_text)` fits the sampler's multi-turn loop
(`Sampler.continue_rollout`): the trainer decodes a turn, passes its text to
the env and appends the returned observation, or ends the row when the step is
done. The calculator is a bounded recursive-descent parser over exact
Fractions: model text is never evaluated by Python.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import Any, ClassVar

from rlvr_jax.tasks import register
from rlvr_jax.tasks.base import (
    CORRECT,
    MALFORMED,
    MAX_RESPONSE_CHARS,
    WRONG_ANSWER,
    Problem,
    Task,
    Verdict,
    extract_answer,
)

# Re-exported: the calculator and number formats live in their own module.
from rlvr_jax.tasks.tools_calc import (  # noqa: F401
    MAX_DEPTH,
    MAX_EXPR_CHARS,
    MAX_LITERAL_DIGITS,
    MAX_MAGNITUDE,
    CalcResult,
    calculate,
    format_number,
    parse_number,
)

_ATTRIBUTES = ("population", "area", "height", "age", "weight", "speed", "depth", "price")
_NUM_ATTRIBUTES = 3  # attributes per problem; the rest of the pool varies across problems
_OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}
_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = ("", "", "n", "r", "sh", "k", "l")
_INSTRUCTIONS = (
    "Use tools to answer. Write one call per turn on its own line:\n"
    "<call>lookup(ENTITY, ATTRIBUTE)</call> returns a fact.\n"
    "<call>calc(EXPRESSION)</call> computes + - * / and parentheses.\n"
)


# ------------------------------------------------------------------- episode
@dataclasses.dataclass(frozen=True)
class StepResult:
    """One environment step.

    Attributes:
      observation: text to append to the context (None once the episode is done).
      done: whether the episode has ended.
      reward: the final reward when done, else None.
      info: "reason" (a REASONS value when done, else "ok" or "error"),
        "tool", "turn" (non-answer turns so far), "detail".
    """

    observation: str | None
    done: bool
    reward: float | None
    info: dict[str, Any]


_CALL_LINE_RE = re.compile(r"<call>([^\n]*)</call>")
_CALL_BODY_RE = re.compile(r"\s*([a-z_]{1,20})\s*\((.*)\)\s*", re.IGNORECASE)
_ANSWER_LINE_RE = re.compile(r"answer\s*[:=]\s*(.*)", re.IGNORECASE)


class ToolEnv:
    """One episode of a tool_lookup problem. Build it with `task.env(problem)`.

    A turn with neither a call nor an answer, a malformed call or an unknown
    tool gets an <error> observation and counts as a turn. After
    `max_turns` non-answer turns, a further non-answer turn ends the episode
    with reward 0 (MALFORMED), so an episode has at most max_turns + 1 model turns.
    """

    def __init__(self, problem: Problem, max_turns: int):
        self.problem = problem
        self.max_turns = max_turns
        self.turns = 0
        self.final: StepResult | None = None
        facts = problem.metadata["facts"]
        # Case-insensitive lookup keys: a tiny model's capitalisation is not the skill tested.
        self._facts = {e.lower(): dict(attrs) for e, attrs in facts.items()}

    @property
    def done(self) -> bool:
        """Whether the episode has ended (further steps return the final result)."""
        return self.final is not None

    def step(self, turn_text: str) -> StepResult:
        """Acts on the last call or answer line of one model turn; never raises.

        Args:
          turn_text: the text the model generated in this turn.
        Returns:
          StepResult: an observation to append, or done with the reward.
        """
        if self.final is not None:
            return dataclasses.replace(self.final, info={**self.final.info, "detail": "over"})
        text = turn_text[-MAX_RESPONSE_CHARS:] if isinstance(turn_text, str) else ""
        action = _last_action(text)
        if action is not None and action[0] == "answer":
            verdict = score_answer(self.problem, action[1])
            return self._end(verdict.reward, verdict.reason, "answer", verdict.detail)
        self.turns += 1
        if self.turns > self.max_turns:
            return self._end(0.0, MALFORMED, None, f"no answer within {self.max_turns} turns")
        if action is None:
            obs, tool, ok = "no call or answer in this turn", None, False
        else:
            tool, obs, ok = self._execute(action[1])
        tag = "result" if ok else "error"
        sep = "" if not text or text.endswith("\n") else "\n"
        info = {"reason": "ok" if ok else "error", "tool": tool, "turn": self.turns, "detail": obs}
        return StepResult(f"{sep}<{tag}>{obs}</{tag}>\n", False, None, info)

    def _end(self, reward: float, reason: str, tool: str | None, detail: str) -> StepResult:
        info = {"reason": reason, "tool": tool, "turn": self.turns, "detail": detail}
        self.final = StepResult(None, True, reward, info)
        return self.final

    def _execute(self, body: str | None) -> tuple[str | None, str, bool]:
        """(tool name, observation text, ok) for one call body."""
        m = _CALL_BODY_RE.fullmatch(body) if body is not None else None
        if m is None:
            return None, "malformed call", False
        tool, args = m.group(1).lower(), m.group(2)
        if tool == "calc":
            value, error = calculate(args)
            return tool, (format_number(value) if error is None else error), error is None
        if tool == "lookup":
            parts = [p.strip() for p in args.split(",")]
            if len(parts) != 2:
                return tool, "lookup takes an entity and an attribute", False
            attrs = self._facts.get(parts[0].lower())
            if attrs is None:
                return tool, f"unknown entity {_clean(parts[0])}", False
            if parts[1].lower() not in attrs:
                return tool, f"unknown attribute {_clean(parts[1])}", False
            return tool, str(attrs[parts[1].lower()]), True
        return tool, f"unknown tool {tool}", False


def _clean(text: str) -> str:
    """Model text echoed in an observation: short, and unable to forge tags."""
    return re.sub(r"[^A-Za-z0-9 _.-]", "?", text[:40])


def _last_action(text: str) -> tuple[str, str | None] | None:
    """The last ("call", body | None if malformed) or ("answer", text) line of a turn."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        m = _ANSWER_LINE_RE.match(stripped)
        if m is not None:
            return "answer", m.group(1)
        if "<call>" in stripped or "</call>" in stripped:
            m = _CALL_LINE_RE.fullmatch(stripped)
            return "call", (m.group(1) if m is not None else None)
    return None


def score_answer(problem: Problem, answer: str | None) -> Verdict:
    """Compares a final-answer text with the problem's answer by exact rational equality.

    Args:
      problem: a tool_lookup problem.
      answer: the answer text (None when the response gave none).
    Returns:
      Verdict: CORRECT, WRONG_ANSWER, or MALFORMED (missing or not a number).
    """
    if answer is None:
        return Verdict(0.0, MALFORMED, None, "no final answer")
    value = parse_number(answer)
    if value is None:
        return Verdict(0.0, MALFORMED, answer[:100], "answer is not a number")
    parsed = format_number(value)
    if value == Fraction(problem.answer):
        return Verdict(1.0, CORRECT, parsed)
    return Verdict(0.0, WRONG_ANSWER, parsed, f"expected {problem.answer}")


def reference_turns(problem: Problem) -> list[str]:
    """The model side of the reference episode: one lookup per fact, one calc, the answer.

    Args:
      problem: a tool_lookup problem.
    Returns:
      The turns, each ending in a newline; fed to `ToolEnv.step` they earn reward 1.
    """
    turns = [f"<call>lookup({e}, {a})</call>\n" for e, a in problem.metadata["lookups"]]
    turns.append(f"<call>calc({problem.metadata['expression']})</call>\n")
    return turns + [f"Answer: {problem.answer}\n"]


# ---------------------------------------------------------------------- task
@register
@dataclasses.dataclass(frozen=True)
class ToolLookup(Task):
    """Questions over a hidden fact table, answered with lookup and calc tool calls.

    Attributes:
      num_entities: entities in the fact table (2..26), each with 3 numeric attributes.
      num_lookups: facts the question combines (1..3; with 1, a constant is the
        second operand).
      max_name_syllables: entity names have min(2, this)..this consonant-vowel
        syllables plus an optional coda (1..4). 1 gives short names ("Ba", "Kosh",
        2-3 tokens) that a tiny model learns to copy into its lookup call sooner.
      instructions: start the prompt with the tool-use instructions (~50 tokens);
        False gives the question line only, for tiny models trained on the format.
      max_turns: non-answer turns allowed before the answer (>= num_lookups + 1,
        the reference episode's tool calls).
      seed: task seed.
    """

    name: ClassVar[str] = "tool_lookup"
    late_options: ClassVar[dict[str, Any]] = {"max_name_syllables": 3, "instructions": True}
    num_entities: int = 8
    num_lookups: int = 2
    max_turns: int = 4
    max_name_syllables: int = 3
    instructions: bool = True
    seed: int = 0

    def __post_init__(self):
        if not 1 <= self.num_lookups <= 3:
            raise ValueError(f"num_lookups must be in 1..3, got {self.num_lookups}")
        if not max(2, self.num_lookups) <= self.num_entities <= 26:
            raise ValueError(f"num_entities must be in 2..26, got {self.num_entities}")
        if self.max_turns < self.num_lookups + 1:
            raise ValueError(f"max_turns must be >= num_lookups + 1, got {self.max_turns}")
        if not 1 <= self.max_name_syllables <= 4:
            raise ValueError(f"max_name_syllables must be in 1..4, got {self.max_name_syllables}")

    def problem(self, index: int, split: str = "train") -> Problem:
        rng = self.rng(index, split)
        entities: list[str] = []
        while len(entities) < self.num_entities:
            # With the default 3 this draws 2..3, as before the option existed.
            n = int(rng.integers(min(2, self.max_name_syllables), self.max_name_syllables + 1))
            name = "".join(_ONSETS[rng.integers(14)] + _VOWELS[rng.integers(5)] for _ in range(n))
            name = (name + _CODAS[rng.integers(len(_CODAS))]).capitalize()
            if name not in entities:
                entities.append(name)
        attrs = [str(a) for a in rng.choice(_ATTRIBUTES, _NUM_ATTRIBUTES, replace=False)]
        facts = {e: {a: int(rng.integers(2, 1000)) for a in attrs} for e in entities}
        picked = rng.choice(self.num_entities, self.num_lookups, replace=False)
        lookups = [(entities[i], attrs[rng.integers(len(attrs))]) for i in picked]
        values = [facts[e][a] for e, a in lookups]
        phrases = [f"the {a} of {e}" for e, a in lookups]
        if self.num_lookups == 1:
            constant = int(rng.integers(2, 20))
            values.append(constant)
            phrases.append(str(constant))
        # Times only as the first operator: left-to-right reading and the usual
        # precedence then agree, so the English question is unambiguous.
        ops = [str(rng.choice(["+", "-", "*"]))] + [
            str(rng.choice(["+", "-"])) for _ in range(len(values) - 2)
        ]
        expression, question = str(values[0]), phrases[0]
        for op, value, phrase in zip(ops, values[1:], phrases[1:], strict=True):
            expression += f" {op} {value}"
            question += f" {_OP_WORDS[op]} {phrase}"
        answer = format_number(calculate(expression).value)
        prompt = f"Question: What is {question}?\n"
        if self.instructions:
            prompt = _INSTRUCTIONS + prompt + 'End with a line "Answer: <number>".\n'
        metadata = {
            "facts": facts,
            "fact_lines": [f"{a} of {e} = {v}" for e, row in facts.items() for a, v in row.items()],
            "lookups": lookups,
            "expression": expression,
            "num_lookups": self.num_lookups,
            "max_turns": self.max_turns,
        }
        problem = Problem(self.problem_id(index, split), prompt, answer, "", metadata)
        return dataclasses.replace(problem, solution=_transcript(problem))

    def env(self, problem: Problem) -> ToolEnv:
        """A fresh episode of `problem` (allows `max_turns` non-answer turns)."""
        return ToolEnv(problem, self.max_turns)

    def episode_turns(self) -> int:
        """`max_turns` non-answer turns, then the answer: the environment ends every episode."""
        return self.max_turns + 1

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Scores a full transcript by its final answer only (calls are not checked)."""
        return score_answer(problem, extract_answer(response))


def _transcript(problem: Problem) -> str:
    """The reference episode: model turns interleaved with the env's observations."""
    env = ToolEnv(problem, len(reference_turns(problem)))
    parts = []
    for turn in reference_turns(problem):
        parts.append(turn)
        result = env.step(turn)
        if result.observation is not None:
            parts.append(result.observation)
    return "".join(parts)
