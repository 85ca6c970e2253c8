"""The shipped task tokenizer: ids, digits, round trips, solution lengths, determinism."""

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.data import vocab
from rlvr_jax.tokenizers import IM_END, IM_START, SentencePieceTokenizer, load_tokenizer

HELD_OUT = 20  # validation-split problems per corpus task


@pytest.fixture(scope="module")
def tok():
    return vocab.default_tokenizer()


@pytest.fixture(scope="module")
def held_out():
    """(label, task, validation problems) per corpus task; never in the training corpus."""
    out = []
    for name, options in vocab.CORPUS_TASKS:
        task = tasks.get(name, **options)
        problems = []
        for i in range(HELD_OUT):
            try:
                problems.append(task.problem(i, "validation"))
            except IndexError:  # the math sample has only a couple of validation records
                break
        out.append((f"{name}{options or ''}", task, problems))
    return out


def test_shipped_model_loads_with_documented_ids(tok):
    assert isinstance(tok, SentencePieceTokenizer)
    assert isinstance(load_tokenizer(vocab.DEFAULT_TOKENIZER_PATH), SentencePieceTokenizer)
    assert vocab.DEFAULT_TOKENIZER_PATH.stat().st_size < 100_000
    assert tok.vocab_size == vocab.DEFAULT_VOCAB_SIZE == 1024
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 2, 3)
    assert [tok.id_to_token(i) for i in range(8)] == [
        "<pad>", "<unk>", "<s>", "</s>", IM_START, IM_END, "<|endoftext|>", "\n"
    ]  # fmt: skip
    assert [tok.id_to_token(i) for i in (8, 263)] == ["<0x00>", "<0xFF>"]
    assert tok.stop_ids == (3, 5, 6)


def test_chat_markers_are_single_tokens(tok):
    for i, marker in zip((4, 5, 6, 7), vocab.USER_DEFINED_SYMBOLS, strict=True):
        assert tok.encode(marker) == [i]
        assert tok.encode(f"x{marker}y").count(i) == 1  # also inside text
    assert tok.token_to_id(IM_END) in tok.stop_ids
    ids = tok.encode_chat([{"role": "user", "content": "hi"}])
    assert ids[0] == tok.token_to_id(IM_START) and ids.count(tok.token_to_id(IM_END)) == 1


def test_digits_are_single_tokens(tok):
    digit_ids = []
    for d in "0123456789":
        ids = tok.encode(d)
        assert len(ids) == 1 and tok.id_to_token(ids[0]) == d
        digit_ids += ids
    assert tok.encode("12345") == [digit_ids[int(d)] for d in "12345"]
    assert tok.encode("x=907")[-3:] == [digit_ids[9], digit_ids[0], digit_ids[7]]


def test_render_example_matches_the_tokenizer_chat_template(tok):
    prompt, solution = "Evaluate: 2 + 3", "2 + 3 = 5\nAnswer: 5"
    chat = tok.apply_chat_template([{"role": "user", "content": prompt}])
    assert vocab.render_example(prompt, solution) == chat + solution + IM_END


def test_round_trip_on_held_out_text_of_every_task(tok, held_out):
    for label, task, problems in held_out:
        assert problems, label
        for text in vocab.task_examples(task, len(problems), "validation"):
            ids = tok.encode(text)
            assert tok.decode(ids, skip_special_tokens=False) == text, label
            assert tok.id_to_token(ids[-1]) == IM_END
            assert vocab.UNK_ID not in ids


def test_any_text_round_trips_through_byte_fallback(tok):
    text = "  héllo\tWörld ß ñ ç 日本語 🙂 \\boxed{\\frac{1}{2}}  \r\n\n\x00 <s></s>end  "
    ids = tok.encode(text)
    assert vocab.UNK_ID not in ids
    assert not {tok.bos_id, tok.eos_id, tok.pad_id} & set(ids)  # control pieces stay text
    assert tok.decode(ids) == text


def test_no_piece_spans_a_line_break(tok, held_out):
    newline = tok.token_to_id("\n")
    assert all("\n" not in tok.id_to_token(i) for i in range(tok.vocab_size) if i != newline)
    for label, task, problems in held_out:
        for text in vocab.task_examples(task, len(problems), "validation"):
            lines = [tok.encode(line) for line in text.split("\n")]
            by_line = [i for ids in lines for i in [*ids, newline]][:-1]
            assert by_line == tok.encode(text), label


def test_prompt_and_response_encode_separately_as_together(tok, held_out):
    # The sampler encodes the prompt, then appends sampled response ids.
    for label, _, problems in held_out:
        for p in problems:
            prompt = tok.apply_chat_template([{"role": "user", "content": p.prompt}])
            together = tok.encode(prompt + p.solution + IM_END)
            assert tok.encode(prompt) + tok.encode(p.solution + IM_END) == together, label


def test_tokens_per_solution_are_small(tok, held_out):
    print("\nmean / max tokens per reference solution (validation split):")
    for label, _, problems in held_out:
        lengths = np.array([len(tok.encode(p.solution)) for p in problems])
        prompts = np.mean([len(tok.encode(p.prompt)) for p in problems])
        print(f"  {label:66s} {lengths.mean():5.1f} / {lengths.max():3d}  (prompt {prompts:.0f})")
        assert lengths.mean() < 150, label
        if label.startswith(("countdown", "arithmetic", "multilingual_arithmetic")):
            assert lengths.max() < 300, label


def test_task_corpus_is_deterministic_and_covers_every_task():
    corpus = vocab.task_corpus(num_per_task=2, seed=3)
    assert corpus == vocab.task_corpus(num_per_task=2, seed=3)
    assert corpus != vocab.task_corpus(num_per_task=2, seed=4)
    assert {name for name, _ in vocab.CORPUS_TASKS} == set(tasks.names()) - vocab.COMPOSED_TASKS
    text = "".join(corpus)
    for marker in ("Answer:", "Respuesta:", "Réponse:", "Antwort:", "<call>", "Vote:"):
        assert marker in text
    assert all(t.startswith(f"{IM_START}user\n") and t.endswith(IM_END) for t in corpus)


def test_training_is_byte_deterministic(tmp_path):
    corpus = vocab.task_corpus(num_per_task=3)
    first = vocab.train_sentencepiece(corpus, vocab_size=400)
    assert vocab.train_sentencepiece(corpus, vocab_size=400) == first
    path = vocab.train_tokenizer(tmp_path / "a" / "sp.model", vocab_size=400, num_per_task=3)
    assert path.read_bytes() == first
    small = load_tokenizer(path)
    assert small.vocab_size == 400 and len(small.encode("77")) == 2


def test_rebuilding_with_script_defaults_reproduces_the_shipped_file(tmp_path):
    rebuilt = vocab.train_tokenizer(tmp_path / "sp.model")  # the script's defaults
    assert rebuilt.read_bytes() == vocab.DEFAULT_TOKENIZER_PATH.read_bytes(), (
        "the shipped tokenizer is stale (or sentencepiece changed version): "
        "run python scripts/make_tokenizer.py"
    )
