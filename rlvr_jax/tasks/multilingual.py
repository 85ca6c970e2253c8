"""Multilingual renderings of the arithmetic task: English, Spanish, French, German.

For the same (seed, split, index) and difficulty options every language shows
the same expression: the tree comes from `ArithmeticTask.expression`, whose
random stream does not depend on the language. Per language only the text
changes: the prompt template, the step lines and the final-answer marker.

Step lines are regular: "<x> <op word> <y> <equals word> <z>", numbers in
digits (or number words with `number_words=True`, which also writes the
expression of the prompt in words):

  lang | +    | -     | *     | =     | answer line       | step example
  en   | plus | minus | times | is    | "Answer: 32"      | "7 plus 5 is 12"
  es   | más  | menos | por   | es    | "Respuesta: 32"   | "7 más 5 es 12"
  fr   | plus | moins | fois  | égale | "Réponse: 32"     | "7 plus 5 égale 12"
  de   | plus | minus | mal   | ist   | "Antwort: 32"     | "7 plus 5 ist 12"

The reference answer line always uses digits. `verify` reads the last
final-answer marker of `answer_language` (case-insensitive; "Reponse" also
accepted) and accepts digits or that language's number words (exact spelling
of `number_to_words`, case and spacing aside); another language's marker is
MALFORMED. The step checker (`first_wrong_step`, rules in arithmetic.py) reads
step lines in any of the four languages (number words included) and the ASCII
form "7 + 5 = 12"; a line counts as a step when it has "=" or an operator word
followed by an equals word (so prose like "this is easy" is not a step).

Number words (0..10^4, own functions, negatives as "<minus word> <words>"):
en without "and" ("one hundred one"), es "cien"/"ciento uno", fr traditional
spelling with hyphens below 100 ("quatre-vingts", "deux cents", "vingt et un"),
de "einhundert", "eintausend" (one compound word).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from typing import ClassVar

from rlvr_jax.tasks import arithmetic, register
from rlvr_jax.tasks.arithmetic import Step, StepCheck, TraceFormat
from rlvr_jax.tasks.base import MAX_RESPONSE_CHARS, Problem, Task, Verdict

# Re-exported: number words and the language table live in their own module.
from rlvr_jax.tasks.multilingual_words import (  # noqa: F401
    LANGUAGES,
    Language,
    get_language,
    number_to_words,
    parse_number,
    words_to_number,
)

_WORD_RE = re.compile(r"[^\W\d_]+")  # runs of letters (any script)
_MAX_STEP_TOKENS = 40  # the longest real step line in words has ~25 tokens


def _parse_localized(tokens: list[str], code: str) -> Step | None:
    """(a, op, b, c) from the lowercased tokens of "<x> <op word> <y> <equals word> <z>"."""
    lang = LANGUAGES[code]
    eq = [i for i, t in enumerate(tokens) if t in lang.equals]
    if len(tokens) > _MAX_STEP_TOKENS or len(eq) != 1:
        return None
    c = parse_number(" ".join(tokens[eq[0] + 1 :]), code)
    left = tokens[: eq[0]]
    if c is None:
        return None
    # Try every operator word as the split point: a negative operand may start with the
    # same word as "minus" (en/de), and only one split makes both sides numbers.
    for i in range(1, len(left) - 1):
        op = lang.op_words.get(left[i])
        if op is None:
            continue
        a = parse_number(" ".join(left[:i]), code)
        b = parse_number(" ".join(left[i + 1 :]), code)
        if a is not None and b is not None:
            return a, op, b, c
    return None


def _claims_step(tokens: list[str], code: str) -> bool:
    """An operator word followed later by an equals word (prose with "is" alone is no step)."""
    lang = LANGUAGES[code]
    eq = next((i for i, t in enumerate(tokens) if t in lang.equals), 0)
    return any(t in lang.op_words for t in tokens[:eq])


_ALL_EQUALS = frozenset(w for lang in LANGUAGES.values() for w in lang.equals)


@functools.cache
def trace_format(language: str, answer_language: str) -> TraceFormat:
    """The step/answer format of a language pair, for arithmetic.first_wrong_step.

    Step lines in any of LANGUAGES are read (`language` is tried first), so the
    locator also works when a model reasons in another language than the prompt's.
    """
    get_language(language)
    order = [language, *(c for c in LANGUAGES if c != language)]

    def tokens(line: str) -> list[str]:
        return line[:300].lower().split()

    def parse_step(line: str) -> Step | None:
        if len(line) > 300:
            return None
        found = arithmetic.parse_step_line(line)
        for code in order:
            found = found or _parse_localized(tokens(line), code)
        return found

    def is_step(line: str) -> bool:
        if "=" in line:
            return True
        words = tokens(line)
        if _ALL_EQUALS.isdisjoint(words):  # fast path: most non-step lines
            return False
        return any(_claims_step(words, code) for code in order)

    marker = rf"(?:{get_language(answer_language).answer_pattern})[ \t]*:"
    return TraceFormat(
        parse_step=parse_step,
        is_step=is_step,
        answer_marker=re.compile(marker, re.IGNORECASE),
        parse_answer=lambda text: parse_number(text, answer_language),
    )


def extract_localized_answer(response: str, answer_language: str) -> str | None:
    """Text after the last final-answer marker of `answer_language` in the response tail."""
    if not isinstance(response, str):
        return None
    marker = trace_format(answer_language, answer_language).answer_marker
    text = response[-MAX_RESPONSE_CHARS:]
    matches = list(marker.finditer(text))
    if not matches:
        return None
    return text[matches[-1].end() :].split("\n", 1)[0][:200].strip() or None


def hint(problem: Problem) -> str:
    """Privileged context for self-distillation: the language's header line + the reference trace.

    The teacher view is `problem.prompt + "\\n" + hint(problem)`.
    """
    return f"{LANGUAGES[problem.metadata['language']].hint}\n{problem.solution}"


def _formats(problem: Problem) -> tuple[str, str]:
    return problem.metadata["language"], problem.metadata["answer_language"]


def first_wrong_step(problem: Problem, response: str) -> StepCheck:
    """Cliff's exact locator in the problem's language (rules in arithmetic.py)."""
    return arithmetic.first_wrong_step(problem, response, trace_format(*_formats(problem)))


def response_cue(problem: Problem, response: str) -> str | None:
    """Order of operations of the response's steps (see arithmetic.response_cue)."""
    return arithmetic.response_cue(problem, response, trace_format(*_formats(problem)))


@functools.cache
def _markers() -> dict[str, str]:
    """word -> language, for words written by exactly one language's traces and numbers."""
    owners: dict[str, set[str]] = {}
    for code, lang in LANGUAGES.items():
        words = {*lang.op_words, *lang.equals, lang.minus, lang.answer.lower(), *lang.extra_markers}
        for n in [*range(101), *range(100, 1001, 100), 2000]:
            words.update(_WORD_RE.findall(lang.words(n)))
        for w in words:
            owners.setdefault(w, set()).add(code)
    # Shared words ("plus", "minus", "six") are no evidence for any one language.
    return {w: next(iter(c)) for w, c in owners.items() if len(c) == 1}


def detect_language(text: str) -> str | None:
    """Which language a response reasons in, by counting language-specific marker words.

    Markers are the operator/equals/answer words and the number words of 0..100
    and round hundreds that belong to one language only. Reads the last
    MAX_RESPONSE_CHARS characters.

    Returns:
      The language code with the most markers; None with no markers or a tie.
    """
    if not isinstance(text, str):
        return None
    markers = _markers()
    counts = Counter(
        markers[w] for w in _WORD_RE.findall(text[-MAX_RESPONSE_CHARS:].lower()) if w in markers
    )
    top = counts.most_common(2)
    if not top or (len(top) == 2 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def language_reward(response: str, language: str) -> float:
    """Reasoning-language reward: 1.0 if `detect_language(response) == language`, else 0.0."""
    return 1.0 if detect_language(response) == language else 0.0


def build_problem(
    problem_id: str,
    tree: arithmetic.Node,
    language: str = "en",
    answer_language: str | None = None,
    number_words: bool = False,
) -> Problem:
    """The Problem for an expression tree rendered in `language`.

    Args:
      problem_id: the Problem id.
      tree: an indexed expression tree (arithmetic.parse_expression / generate_expression).
      language, answer_language, number_words: see MultilingualArithmetic.

    Returns:
      A Problem whose metadata is arithmetic.build_problem's plus language,
      answer_language and number_words.
    """
    answer_language = answer_language or language
    lang, ans = get_language(language), get_language(answer_language)
    num = (lambda n: number_to_words(n, language)) if number_words else str
    steps = [
        f"{num(a)} {lang.ops[op]} {num(b)} {lang.equals[0]} {num(c)}"
        for a, op, b, c in arithmetic.reference_steps(tree)
    ]
    solution = "\n".join([*steps, f"{ans.answer}: {tree.value}"])
    expression = arithmetic.render(tree, num, lang.ops if number_words else None)
    prompt = lang.prompt.format(expression=expression, marker=ans.answer)
    base = arithmetic.build_problem(problem_id, tree)
    metadata = {
        **base.metadata,
        "language": language,
        "answer_language": answer_language,
        "number_words": number_words,
    }
    return Problem(problem_id, prompt, base.answer, solution, metadata)


class _LanguageOfProblem:
    """Verification and per-problem hooks that read the language off the problem's metadata."""

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Final-answer equality; the answer follows the answer language's marker."""
        lang = problem.metadata["answer_language"]
        text = extract_localized_answer(response, lang)
        return arithmetic.integer_verdict(
            text, int(problem.answer), lambda t: parse_number(t, lang)
        )

    def group_metrics(self, problem: Problem, responses: list[str]) -> dict[str, float]:
        """Language consistency: the fraction of responses that reason in the prompt's language."""
        same = [language_reward(r, problem.metadata["language"]) for r in responses]
        return {"language_consistency": sum(same) / len(same) if same else 0.0}

    def first_wrong_step(self, problem: Problem, response: str) -> StepCheck:
        """See module-level `first_wrong_step`."""
        return first_wrong_step(problem, response)

    def response_cue(self, problem: Problem, response: str) -> str | None:
        """See module-level `response_cue`."""
        return response_cue(problem, response)

    def hint(self, problem: Problem) -> str:
        """See module-level `hint`."""
        return hint(problem)


@register
@dataclasses.dataclass(frozen=True)
class MultilingualArithmetic(_LanguageOfProblem, Task):
    """The arithmetic task rendered in one language.

    Attributes:
      num_operands, max_operand, operators, allow_parentheses: as ArithmeticTask.
      language: prompt and step language, one of LANGUAGES ("en", "es", "fr", "de").
      answer_language: language of the final-answer marker; None = `language`.
      number_words: write numbers of the prompt and steps as words.
    """

    name: ClassVar[str] = "multilingual_arithmetic"
    num_operands: int = 4
    max_operand: int = 20
    operators: str = "+-*"
    allow_parentheses: bool = True
    language: str = "en"
    answer_language: str | None = None
    number_words: bool = False

    def __post_init__(self):
        get_language(self.language)
        get_language(self.answer_lang)
        _ = self.base  # constructing it validates the arithmetic options

    @property
    def answer_lang(self) -> str:
        return self.answer_language or self.language

    @property
    def base(self) -> arithmetic.ArithmeticTask:
        """The arithmetic task whose expressions this one renders."""
        return _arithmetic_base(self)

    def problem(self, index: int, split: str = "train") -> Problem:
        tree = self.base.expression(index, split)
        return build_problem(
            self.problem_id(index, split), tree, self.language, self.answer_lang, self.number_words
        )


def _arithmetic_base(t) -> arithmetic.ArithmeticTask:
    return arithmetic.ArithmeticTask(
        seed=t.seed,
        num_operands=t.num_operands,
        max_operand=t.max_operand,
        operators=t.operators,
        allow_parentheses=t.allow_parentheses,
    )


@register
@dataclasses.dataclass(frozen=True)
class MultilingualMix(_LanguageOfProblem, Task):
    """Multilingual arithmetic in several languages: problem i is in languages[i mod k].

    The data of the multilingual warm start (one base that reasons in every
    language, the common start of the cross-lingual train x eval matrix).
    Problem i has the expression of MultilingualArithmetic's problem i.

    Attributes:
      num_operands, max_operand, operators, allow_parentheses, number_words: as
        MultilingualArithmetic.
      languages: comma-separated codes of LANGUAGES (prompt = step = answer language).
    """

    name: ClassVar[str] = "multilingual_mix"
    num_operands: int = 4
    max_operand: int = 20
    operators: str = "+-*"
    allow_parentheses: bool = True
    languages: str = "en,es,fr,de"
    number_words: bool = False

    def __post_init__(self):
        codes = self.codes
        if not codes or len(set(codes)) != len(codes):
            raise ValueError(
                f"languages {self.languages!r}: need distinct codes of {sorted(LANGUAGES)}"
            )
        for code in codes:
            get_language(code)
        _arithmetic_base(self)

    @property
    def codes(self) -> list[str]:
        return [c.strip() for c in self.languages.split(",") if c.strip()]

    def problem(self, index: int, split: str = "train") -> Problem:
        lang = self.codes[index % len(self.codes)]
        tree = _arithmetic_base(self).expression(index, split)
        return build_problem(self.problem_id(index, split), tree, lang, lang, self.number_words)
