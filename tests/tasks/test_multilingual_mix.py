"""multilingual_mix: problem i in languages[i mod k], the single-language task's expression."""

import pytest

from rlvr_jax import tasks
from rlvr_jax.tasks.base import CORRECT, MALFORMED

OPTS = dict(num_operands=3, max_operand=9, operators="+-")


def test_languages_rotate_and_match_the_single_language_task():
    mix = tasks.get("multilingual_mix", languages="en,de,es", **OPTS)
    for i in range(6):
        p = mix.problem(i, "test")
        lang = ["en", "de", "es"][i % 3]
        single = tasks.get("multilingual_arithmetic", language=lang, **OPTS).problem(i, "test")
        assert p.metadata["language"] == p.metadata["answer_language"] == lang
        assert (p.prompt, p.solution, p.answer) == (single.prompt, single.solution, single.answer)
        assert p.id == f"multilingual_mix/test/{i}"
        assert mix.verify(p, p.solution).reason == CORRECT


def test_answer_marker_of_another_language_is_malformed():
    mix = tasks.get("multilingual_mix", **OPTS)
    es = mix.problem(1)
    assert es.metadata["language"] == "es"
    assert mix.verify(es, f"Answer: {es.answer}").reason == MALFORMED
    assert mix.verify(es, f"Respuesta: {es.answer}").reason == CORRECT


@pytest.mark.parametrize("languages", ["", "en,en", "en,xx"])
def test_bad_languages(languages):
    with pytest.raises(ValueError):
        tasks.get("multilingual_mix", languages=languages)
