"""Tests of the multilingual arithmetic task: number words, renderings, detection, robustness."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tasks
from rlvr_jax.tasks import REASONS, arithmetic, multilingual
from rlvr_jax.tasks.arithmetic import STEP_ARITHMETIC, STEP_INVALID, STEP_OK, STEP_REASONS
from rlvr_jax.tasks.base import CORRECT, MALFORMED, WRONG_ANSWER
from rlvr_jax.tasks.multilingual import (
    detect_language,
    first_wrong_step,
    language_reward,
    number_to_words,
    response_cue,
    words_to_number,
)

LANGS = ("en", "es", "fr", "de")

# fmt: off
WORDS = {
    "en": {0: "zero", 1: "one", 16: "sixteen", 21: "twenty-one", 71: "seventy-one", 80: "eighty",
           99: "ninety-nine", 100: "one hundred", 101: "one hundred one", 1000: "one thousand",
           1999: "one thousand nine hundred ninety-nine", 10000: "ten thousand",
           -5: "minus five"},
    "es": {0: "cero", 1: "uno", 16: "dieciséis", 21: "veintiuno", 22: "veintidós",
           71: "setenta y uno", 80: "ochenta", 99: "noventa y nueve", 100: "cien",
           101: "ciento uno", 500: "quinientos", 700: "setecientos", 1000: "mil",
           1999: "mil novecientos noventa y nueve", 2001: "dos mil uno", 10000: "diez mil",
           -5: "menos cinco"},
    "fr": {0: "zéro", 1: "un", 16: "seize", 17: "dix-sept", 21: "vingt et un",
           70: "soixante-dix", 71: "soixante et onze", 72: "soixante-douze",
           80: "quatre-vingts", 81: "quatre-vingt-un", 91: "quatre-vingt-onze",
           99: "quatre-vingt-dix-neuf", 100: "cent", 101: "cent un", 200: "deux cents",
           201: "deux cent un", 280: "deux cent quatre-vingts", 1000: "mille",
           1999: "mille neuf cent quatre-vingt-dix-neuf", 2000: "deux mille",
           2200: "deux mille deux cents", 10000: "dix mille", -5: "moins cinq"},
    "de": {0: "null", 1: "eins", 16: "sechzehn", 17: "siebzehn", 21: "einundzwanzig",
           30: "dreißig", 71: "einundsiebzig", 80: "achtzig", 99: "neunundneunzig",
           100: "einhundert", 101: "einhunderteins", 1000: "eintausend",
           1999: "eintausendneunhundertneunundneunzig", 2001: "zweitausendeins",
           10000: "zehntausend", -5: "minus fünf"},
}
# fmt: on


@pytest.mark.parametrize("lang", LANGS)
def test_number_words_table(lang):
    for n, words in WORDS[lang].items():
        assert number_to_words(n, lang) == words, n
        assert words_to_number(words.upper(), lang) == n


@pytest.mark.parametrize("lang", LANGS)
def test_number_words_round_trip_and_injective(lang):
    all_words = [number_to_words(n, lang) for n in range(arithmetic.VALUE_BOUND + 1)]
    assert len(set(all_words)) == len(all_words)
    assert all(words_to_number(w, lang) == n for n, w in enumerate(all_words))
    with pytest.raises(ValueError):
        number_to_words(arithmetic.VALUE_BOUND + 1, lang)
    assert words_to_number("twenty one", "fr") is None  # not a French number


def test_unknown_language_lists_choices():
    with pytest.raises(ValueError, match="valid"):
        tasks.get("multilingual_arithmetic", language="it")
    with pytest.raises(ValueError):
        tasks.get("multilingual_arithmetic", answer_language="xx")


def test_same_expression_in_every_language():
    base = tasks.get("arithmetic", seed=3)
    for split in ("train", "test"):
        for i in range(30):
            expected = base.problem(i, split).metadata["expression"]
            for lang in LANGS:
                for words in (False, True):
                    task = tasks.get(
                        "multilingual_arithmetic", seed=3, language=lang, number_words=words
                    )
                    p = task.problem(i, split)
                    assert p.metadata["expression"] == expected and p.metadata["language"] == lang
    a = tasks.get("multilingual_arithmetic", language="es")
    assert a.problem(4) == tasks.get("multilingual_arithmetic", language="es").problem(4)
    assert a.problem(4).metadata != a.problem(4, "test").metadata


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("answer_lang", [None, "en", "de"])
@pytest.mark.parametrize("words", [False, True])
def test_reference_solutions_verify_in_every_language(lang, answer_lang, words):
    task = tasks.get(
        "multilingual_arithmetic", language=lang, answer_language=answer_lang, number_words=words
    )
    for p in task.problems(40, "validation"):
        assert task.verify(p, p.solution).reason == CORRECT
        assert first_wrong_step(p, p.solution).reason == STEP_OK
        assert response_cue(p, p.solution) == p.metadata["cue"]
        assert detect_language(p.solution) == lang
        assert task.hint(p).endswith(p.solution)


def make(lang, answer_lang=None, words=False, expression="(7 + 5) * 3 - 4"):
    tree = arithmetic.parse_expression(expression)
    return multilingual.build_problem("m/0", tree, lang, answer_lang, words)


def test_hand_written_renderings():
    es = make("es")
    assert es.solution == "7 más 5 es 12\n12 por 3 es 36\n36 menos 4 es 32\nRespuesta: 32"
    assert es.prompt.startswith("Calcula: (7 + 5) * 3 - 4\n") and "Respuesta: <número>" in es.prompt
    fr = make("fr")
    assert fr.solution == "7 plus 5 égale 12\n12 fois 3 égale 36\n36 moins 4 égale 32\nRéponse: 32"
    de = make("de")
    assert de.solution == "7 plus 5 ist 12\n12 mal 3 ist 36\n36 minus 4 ist 32\nAntwort: 32"
    en = make("en")
    assert en.solution == "7 plus 5 is 12\n12 times 3 is 36\n36 minus 4 is 32\nAnswer: 32"
    words = make("es", words=True)
    assert words.prompt.startswith("Calcula: (siete más cinco) por tres menos cuatro\n")
    assert words.solution.splitlines()[2] == "treinta y seis menos cuatro es treinta y dos"
    assert make("es", "en").solution.endswith("\nAnswer: 32")
    assert 'Termina con "Answer: <número>"' in make("es", "en").prompt


@pytest.mark.parametrize(
    "lang, response, reason",
    [
        ("es", "Respuesta: 32", CORRECT),
        ("es", "respuesta: treinta y dos", CORRECT),
        ("es", "Respuesta: 33", WRONG_ANSWER),
        ("es", "Answer: 32", MALFORMED),  # not the answer language's marker
        ("es", "Respuesta: ٣٢", MALFORMED),
        ("fr", "Réponse : 32", CORRECT),
        ("fr", "Reponse: trente-deux", CORRECT),
        ("fr", "Réponse: trente deux", MALFORMED),  # spelling is exact
        ("de", "Antwort: zweiunddreißig", CORRECT),
        ("de", "Antwort: 3 2", MALFORMED),
        ("en", "Answer: thirty-two", CORRECT),
        ("en", "The result is 32", MALFORMED),
    ],
)
def test_verify_reasons(lang, response, reason):
    task = tasks.get("multilingual_arithmetic", language=lang)
    assert task.verify(make(lang), response).reason == reason


def test_first_wrong_step_localized():
    p = make("es")
    response = "7 más 5 es 12\n12 por 3 es 35\n35 menos 4 es 31\nRespuesta: 31"
    check = first_wrong_step(p, response)
    assert (check.index, check.reason) == (1, STEP_ARITHMETIC)
    assert response[slice(*check.char_span)] == "12 por 3 es 35"
    words = "siete más cinco es doce\ncinco por tres es quince\nRespuesta: 11"
    assert (first_wrong_step(p, words).index, first_wrong_step(p, words).reason) == (
        1,
        STEP_INVALID,
    )
    # Steps in another language or in symbols are still checked; prose with "is" is no step.
    mixed = "This is easy.\n7 plus 5 is 12\n12 * 3 = 36\n36 moins 4 égale 32\nRespuesta: 32"
    assert first_wrong_step(p, mixed).reason == STEP_OK
    assert response_cue(p, mixed) == "0,1,2"
    minus = make("en", words=True, expression="3 - 5 * 2")
    assert minus.solution.splitlines()[1] == "three minus ten is minus seven"
    assert first_wrong_step(minus, minus.solution).reason == STEP_OK


@pytest.mark.parametrize(
    "text, lang",
    [
        ("The answer is twelve", "en"),
        ("La respuesta es doce", "es"),
        ("La réponse est douze", "fr"),
        ("Die Antwort ist zwölf", "de"),
        (
            "7 plus 5 égale 12\n12 fois 3 égale 36\nAnswer: 36",
            "fr",
        ),  # the steps outweigh a foreign marker
        ("7 + 5 = 12\nplus minus six", None),  # only shared words
        ("is es", None),  # tie
        ("", None),
    ],
)
def test_detect_language(text, lang):
    assert detect_language(text) == lang
    assert language_reward(text, "fr") == (1.0 if lang == "fr" else 0.0)


ADVERSARIAL = [
    "",
    "9**9**9**9",
    "10^100000",
    "9" * 100_000,
    "(" * 50_000,
    "(" * 1000 + "1" + ")" * 1000,
    "٣",
    "３２",
    "__import__('os').system('x')",
    "\x00" * 1000,
    "plus " * 20_000,
    ("uno más " * 40 + "es dos\n") * 300,
    ("minus " * 100 + "is minus " * 50 + "\n") * 100,
    "es " * 30_000,
    "Réponse:" * 10_000,
    "mil " * 25_000,
    "dos mil novecientos noventa y nueve " * 3000,
]
ADVERSARIAL += ["Respuesta: " + s for s in ADVERSARIAL]


def _check_bounded(task, problem, response):
    for fn in (
        lambda: task.verify(problem, response),
        lambda: first_wrong_step(problem, response),
        lambda: response_cue(problem, response),
        lambda: detect_language(response),
        lambda: words_to_number(response, "fr"),
    ):
        start = time.perf_counter()
        out = fn()
        assert time.perf_counter() - start < 0.1
        if isinstance(out, tasks.Verdict):
            assert out.reason in REASONS
        elif isinstance(out, arithmetic.StepCheck):
            assert out.reason in STEP_REASONS
        else:
            assert out is None or isinstance(out, str | int)


@pytest.fixture(scope="module")
def warm():
    for lang in LANGS:  # build the number-word tables once, outside the timed calls
        words_to_number("x", lang)
    detect_language("x")


@pytest.mark.parametrize("response", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_strings(warm, response):
    task = tasks.get("multilingual_arithmetic", language="es")
    _check_bounded(task, make("es"), response)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300) | st.text("0123456789+-*= \nmásepor Respuesta:", max_size=300))
def test_fuzz_never_raises(warm, response):
    task = tasks.get("multilingual_arithmetic", language="es")
    _check_bounded(task, make("es"), response)
