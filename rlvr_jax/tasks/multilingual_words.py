"""Number words and language definitions of the multilingual arithmetic task.

Number words (0..10^4, own functions, negatives as "<minus word> <words>"):
en without "and" ("one hundred one"), es "cien"/"ciento uno", fr traditional
spelling with hyphens below 100 ("quatre-vingts", "deux cents", "vingt et un"),
de "einhundert", "eintausend" (one compound word).

Used by `rlvr_jax.tasks.multilingual`, which re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from rlvr_jax.tasks.arithmetic_expr import VALUE_BOUND
from rlvr_jax.tasks.arithmetic_steps import parse_integer

_EN_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    " fifteen sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ES_UNITS = (
    "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince"
    " dieciséis diecisiete dieciocho diecinueve veinte veintiuno veintidós veintitrés"
    " veinticuatro veinticinco veintiséis veintisiete veintiocho veintinueve"
).split()
_ES_TENS = "_ _ _ treinta cuarenta cincuenta sesenta setenta ochenta noventa".split()
_ES_HUNDREDS = (
    "_ ciento doscientos trescientos cuatrocientos quinientos seiscientos setecientos"
    " ochocientos novecientos"
).split()
_FR_UNITS = (
    "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze"
    " seize dix-sept dix-huit dix-neuf"
).split()
_FR_TENS = "_ _ vingt trente quarante cinquante soixante".split()
_DE_UNITS = (
    "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn"
    " fünfzehn sechzehn siebzehn achtzehn neunzehn"
).split()
_DE_TENS = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()


def _en(n: int) -> str:
    if n < 20:
        return _EN_UNITS[n]
    if n < 100:
        t, u = divmod(n, 10)
        return _EN_TENS[t] + (f"-{_EN_UNITS[u]}" if u else "")
    if n < 1000:
        h, r = divmod(n, 100)
        return f"{_EN_UNITS[h]} hundred" + (f" {_en(r)}" if r else "")
    th, r = divmod(n, 1000)
    return f"{_en(th)} thousand" + (f" {_en(r)}" if r else "")


def _es(n: int) -> str:
    if n < 30:
        return _ES_UNITS[n]
    if n < 100:
        t, u = divmod(n, 10)
        return _ES_TENS[t] + (f" y {_ES_UNITS[u]}" if u else "")
    if n == 100:
        return "cien"
    if n < 1000:
        h, r = divmod(n, 100)
        return _ES_HUNDREDS[h] + (f" {_es(r)}" if r else "")
    th, r = divmod(n, 1000)
    return ("mil" if th == 1 else f"{_es(th)} mil") + (f" {_es(r)}" if r else "")


def _fr_below_100(n: int) -> str:
    if n < 20:
        return _FR_UNITS[n]
    if n < 70:
        t, u = divmod(n, 10)
        if u in (0, 1):
            return _FR_TENS[t] + (" et un" if u else "")
        return f"{_FR_TENS[t]}-{_FR_UNITS[u]}"
    if n < 80:  # 70..79 count on from soixante: soixante-dix, soixante et onze, ...
        return "soixante et onze" if n == 71 else f"soixante-{_FR_UNITS[n - 60]}"
    return "quatre-vingts" if n == 80 else f"quatre-vingt-{_FR_UNITS[n - 80]}"


def _fr(n: int) -> str:
    if n < 100:
        return _fr_below_100(n)
    if n < 1000:
        h, r = divmod(n, 100)
        # "cent" takes a plural s only when multiplied and final: deux cents, deux cent un.
        head = "cent" if h == 1 else f"{_FR_UNITS[h]} cent" + ("" if r else "s")
        return head + (f" {_fr_below_100(r)}" if r else "")
    th, r = divmod(n, 1000)  # "mille" is invariable
    return ("mille" if th == 1 else f"{_fr(th)} mille") + (f" {_fr(r)}" if r else "")


def _de_below_100(n: int) -> str:
    if n < 20:
        return _DE_UNITS[n]
    t, u = divmod(n, 10)
    return f"{'ein' if u == 1 else _DE_UNITS[u]}und{_DE_TENS[t]}" if u else _DE_TENS[t]


def _de(n: int) -> str:
    if n < 100:
        return _de_below_100(n)
    if n < 1000:
        h, r = divmod(n, 100)
        return ("ein" if h == 1 else _DE_UNITS[h]) + "hundert" + (_de_below_100(r) if r else "")
    th, r = divmod(n, 1000)
    return ("ein" if th == 1 else _de(th)) + "tausend" + (_de(r) if r else "")


@dataclasses.dataclass(frozen=True)
class Language:
    """Everything language-specific: words, templates, answer marker."""

    words: Callable[[int], str]  # 0..VALUE_BOUND -> number words
    ops: dict[str, str]  # "+"/"-"/"*" -> operator word written in traces
    op_words: dict[str, str]  # every accepted operator word -> symbol
    equals: tuple[str, ...]  # accepted equals words; the first is written
    minus: str  # prefix word of negative numbers
    answer: str  # final-answer marker word as written
    answer_pattern: str  # regex of accepted marker words
    prompt: str  # template with {expression}, {marker}
    hint: str  # header of the privileged hint
    extra_markers: tuple[str, ...] = ()  # more words counted by detect_language


LANGUAGES = {
    "en": Language(
        words=_en,
        ops={"+": "plus", "-": "minus", "*": "times"},
        op_words={"plus": "+", "minus": "-", "times": "*"},
        equals=("is", "equals"),
        minus="minus",
        answer="Answer",
        answer_pattern="answer",
        prompt='Evaluate: {expression}\nWrite one step per line as "a plus b is c" (plus, minus,'
        ' times). End with "{marker}: <number>".',
        hint="Reference solution:",
        extra_markers=("the", "step", "then", "first"),
    ),
    "es": Language(
        words=_es,
        ops={"+": "más", "-": "menos", "*": "por"},
        op_words={"más": "+", "mas": "+", "menos": "-", "por": "*"},
        equals=("es",),
        minus="menos",
        answer="Respuesta",
        answer_pattern="respuesta",
        prompt='Calcula: {expression}\nEscribe un paso por línea como "a más b es c" (más, menos,'
        ' por). Termina con "{marker}: <número>".',
        hint="Solución de referencia:",
        extra_markers=("el", "la", "los", "paso", "luego", "primero", "entonces"),
    ),
    "fr": Language(
        words=_fr,
        ops={"+": "plus", "-": "moins", "*": "fois"},
        op_words={"plus": "+", "moins": "-", "fois": "*"},
        equals=("égale", "egale"),
        minus="moins",
        answer="Réponse",
        answer_pattern="r[ée]ponse",
        prompt='Calcule: {expression}\nÉcris une étape par ligne comme "a plus b égale c" (plus,'
        ' moins, fois). Termine par "{marker}: <nombre>".',
        hint="Solution de référence:",
        extra_markers=("reponse", "zero", "le", "la", "les", "étape", "puis", "donc"),
    ),
    "de": Language(
        words=_de,
        ops={"+": "plus", "-": "minus", "*": "mal"},
        op_words={"plus": "+", "minus": "-", "mal": "*"},
        equals=("ist",),
        minus="minus",
        answer="Antwort",
        answer_pattern="antwort",
        prompt='Berechne: {expression}\nSchreibe einen Schritt pro Zeile als "a plus b ist c"'
        ' (plus, minus, mal). Ende mit "{marker}: <Zahl>".',
        hint="Musterlösung:",
        extra_markers=("der", "die", "das", "schritt", "dann", "zuerst"),
    ),
}


def get_language(code: str) -> Language:
    """The Language of `code`; ValueError listing the valid codes."""
    if code not in LANGUAGES:
        raise ValueError(f"unknown language {code!r}; valid: {sorted(LANGUAGES)}")
    return LANGUAGES[code]


def number_to_words(n: int, language: str) -> str:
    """Number words of an integer with |n| <= VALUE_BOUND, e.g. (21, "fr") -> "vingt et un".

    Raises:
      ValueError: unknown language or |n| > VALUE_BOUND.
    """
    lang = get_language(language)
    if abs(n) > VALUE_BOUND:
        raise ValueError(f"|{n}| > {VALUE_BOUND}")
    return f"{lang.minus} {lang.words(-n)}" if n < 0 else lang.words(n)


@functools.cache
def _word_table(language: str) -> dict[str, int]:
    # Built once per language (~10^4 entries): lookup is then O(1) and bounded.
    words = get_language(language).words
    return {words(n).casefold(): n for n in range(VALUE_BOUND + 1)}


def words_to_number(text: str, language: str) -> int | None:
    """Inverse of `number_to_words` (case, "ß"/"ss" and runs of spaces ignored); else None."""
    if not isinstance(text, str) or len(text) > 200:
        return None
    tokens = text.casefold().split()
    sign = 1
    if len(tokens) > 1 and tokens[0] == get_language(language).minus:
        sign, tokens = -1, tokens[1:]
    value = _word_table(language).get(" ".join(tokens))
    return None if value is None else sign * value


def parse_number(text: str, language: str) -> int | None:
    """Digits (strict, see parse_integer) or number words of `language`."""
    value = parse_integer(text)
    if value is None and isinstance(text, str):
        value = words_to_number(text.strip().rstrip("."), language)
    return value
