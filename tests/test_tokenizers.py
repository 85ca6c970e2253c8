"""Tests for rlvr_jax.tokenizers against the sentencepiece and transformers oracles."""

import json
import random
import re
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import tokenizers as tk

NUMBER_WORDS = "zero one two three four five six seven eight nine ten".split()
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The ChatML template that transformers renders as the parity oracle.
CHATML_JINJA = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MESSAGES = [
    {"role": "user", "content": "What is seven plus 12?"},
    {"role": "assistant", "content": "The answer is 19."},
    {"role": "user", "content": "And three times 4?"},
]


def synthetic_lines(n, seed):
    rng = random.Random(seed)
    ops = ["plus", "minus", "times"]
    return [
        f"What is {rng.choice(NUMBER_WORDS)} {rng.choice(ops)} {rng.randint(0, 999)}? "
        f"The answer is {rng.randint(0, 9999)}."
        for _ in range(n)
    ]


HELD_OUT = synthetic_lines(20, seed=1)


# ----- sentencepiece -----


@pytest.fixture(scope="module")
def sp_model_path(tmp_path_factory):
    import sentencepiece as spm

    prefix = tmp_path_factory.mktemp("sp") / "toy"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(synthetic_lines(400, seed=0)),
        model_prefix=str(prefix),
        vocab_size=100,
        user_defined_symbols=["<|im_start|>", "<|im_end|>"],
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def test_sentencepiece_matches_processor(sp_model_path):
    import sentencepiece as spm

    oracle = spm.SentencePieceProcessor(model_file=str(sp_model_path))
    tok = tk.load_tokenizer(sp_model_path)
    assert isinstance(tok, tk.SentencePieceTokenizer)
    assert tok.vocab_size == oracle.get_piece_size() == 100
    for text in HELD_OUT:
        ids = tok.encode(text)
        assert ids == oracle.encode(text, out_type=int)
        assert tok.decode(ids) == text
        assert tok.decode(np.asarray(ids, dtype=np.int32)) == text
    assert [tok.id_to_token(i) for i in range(100)] == [oracle.id_to_piece(i) for i in range(100)]


def test_sentencepiece_special_ids(sp_model_path, tmp_path):
    tok = tk.SentencePieceTokenizer(sp_model_path)
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 3)
    im_end = tok.token_to_id("<|im_end|>")
    assert im_end is not None and tok.stop_ids == (2, im_end)
    assert tok.token_to_id("not-a-piece") is None
    ids = tok.encode("seven", add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.decode(ids) == "seven"
    assert tok.decode(ids, skip_special_tokens=False) == "<s>seven</s>"


def test_sentencepiece_without_pad_falls_back_to_eos(tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(synthetic_lines(300, seed=2)),
        model_prefix=str(tmp_path / "nopad"),
        vocab_size=80,
        bos_id=-1,
        minloglevel=2,
    )
    tok = tk.load_tokenizer(tmp_path / "nopad.model")
    assert tok.bos_id is None and tok.eos_id == 2 and tok.pad_id == 2
    with pytest.raises(ValueError, match="no BOS"):
        tok.encode("one", add_bos=True)


def test_directory_with_tokenizer_model(sp_model_path, tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(sp_model_path.read_bytes())
    assert isinstance(tk.load_tokenizer(tmp_path), tk.SentencePieceTokenizer)


# ----- Hugging Face tokenizer.json -----


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=CHAT_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(synthetic_lines(400, seed=0), trainer)
    im_start, eot = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|endoftext|>")
    # A post-processor that adds tokens: HFTokenizer.encode must not apply it.
    tok.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A <|endoftext|>",
        special_tokens=[("<|im_start|>", im_start), ("<|endoftext|>", eot)],
    )
    folder = tmp_path_factory.mktemp("hf")
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": True},
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [eot, 250]}))
    return folder


def test_hf_matches_transformers(hf_dir):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    oracle = PreTrainedTokenizerFast(tokenizer_file=str(hf_dir / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(hf_dir))
    tok = tk.load_tokenizer(hf_dir)
    assert isinstance(tok, tk.HFTokenizer)
    assert tok.vocab_size == len(oracle)
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (
        auto.bos_token_id,
        auto.eos_token_id,
        auto.pad_token_id,
    )
    texts = [*HELD_OUT, "snowman ☃ and emoji 🙂\nnew line", "<|im_start|>user\nhi<|im_end|>\n"]
    for text in texts:
        ids = tok.encode(text)
        assert ids == oracle.encode(text, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=False) == text
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == oracle.decode(
                ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False
            )
    ids = tok.encode("one plus two", add_eos=True)
    assert ids == oracle.encode("one plus two", add_special_tokens=False) + [tok.eos_id]
    for i in range(tok.vocab_size):
        assert tok.id_to_token(i) == oracle.convert_ids_to_tokens(i)
        assert tok.token_to_id(oracle.convert_ids_to_tokens(i)) == i


def test_hf_chat_template_matches_transformers(hf_dir):
    from transformers import PreTrainedTokenizerFast

    oracle = PreTrainedTokenizerFast(tokenizer_file=str(hf_dir / "tokenizer.json"))
    tok = tk.HFTokenizer(hf_dir / "tokenizer.json")
    system = "You are a careful calculator."
    for gen in (True, False):
        expected = oracle.apply_chat_template(
            [{"role": "system", "content": system}, *MESSAGES],
            tokenize=False,
            add_generation_prompt=gen,
            chat_template=CHATML_JINJA,
        )
        text = tok.apply_chat_template(MESSAGES, add_generation_prompt=gen, system=system)
        assert text == expected
        assert tok.encode_chat(MESSAGES, add_generation_prompt=gen, system=system) == (
            oracle.encode(expected, add_special_tokens=False)
        )


def test_hf_stop_ids(hf_dir):
    tok = tk.load_tokenizer(hf_dir / "tokenizer.json")
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    assert tok.stop_ids == (eot, im_end, 250)


def test_hf_special_tokens_map_overrides_config(hf_dir, tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((hf_dir / name).read_bytes())
    (tmp_path / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>"})
    )
    tok = tk.HFTokenizer(tmp_path)
    assert tok.bos_id == tok.token_to_id("<|im_start|>")
    assert tok.eos_id == tok.token_to_id("<|im_end|>")
    assert tok.pad_id == tok.token_to_id("<|endoftext|>")
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<nope>"}))
    with pytest.raises(ValueError, match=r"'<nope>'.*special_tokens_map\.json"):
        tk.HFTokenizer(tmp_path)


# ----- CharTokenizer -----

CHAR = tk.CharTokenizer()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=tk.CharTokenizer.DEFAULT_ALPHABET, max_size=60))
def test_char_round_trip(text):
    ids = CHAR.encode(text)
    assert CHAR.decode(ids, skip_special_tokens=False) == text
    if not any(s in text for s in tk.CharTokenizer.SPECIALS):
        assert ids == [CHAR.token_to_id(c) for c in text]
        assert all(5 <= i < CHAR.vocab_size for i in ids)
        assert CHAR.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=tk.CharTokenizer.DEFAULT_ALPHABET, max_size=8),
            st.sampled_from(tk.CharTokenizer.SPECIALS),
        ),
        max_size=10,
    )
)
def test_char_round_trip_with_special_tokens(parts):
    text = "".join(parts)
    assert CHAR.decode(CHAR.encode(text), skip_special_tokens=False) == text


def test_char_vocab_layout():
    alphabet = string.printable.replace("\x0b", "").replace("\x0c", "")
    assert CHAR.vocab_size == 5 + len(alphabet) == 103
    assert (CHAR.pad_id, CHAR.bos_id, CHAR.eos_id) == (0, 1, 2)
    assert CHAR.stop_ids == (2, 4)
    assert [CHAR.id_to_token(i) for i in range(5)] == [
        "<pad>",
        "<bos>",
        "<eos>",
        "<|im_start|>",
        "<|im_end|>",
    ]
    assert CHAR.encode("a") == [5 + alphabet.index("a")]
    small = tk.CharTokenizer("abca")
    assert small.vocab_size == 8 and small.encode("cab") == [7, 5, 6]


def test_char_special_tokens_in_text():
    text = CHAR.apply_chat_template([{"role": "user", "content": "2+2?"}], system="Be brief.")
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = CHAR.encode(text, add_bos=True, add_eos=True)
    assert ids.count(3) == 3 and ids.count(4) == 2 and ids[0] == 1 and ids[-1] == 2
    assert CHAR.decode(ids, skip_special_tokens=False) == "<bos>" + text + "<eos>"
    assert CHAR.decode(ids) == "system\nBe brief.\nuser\n2+2?\nassistant\n"
    assert CHAR.encode_chat([{"role": "user", "content": "2+2?"}], system="Be brief.") == ids[1:-1]
    assert CHAR.encode("x<eos>y<pad>") == [CHAR.token_to_id("x"), 2, CHAR.token_to_id("y"), 0]


def test_char_out_of_alphabet():
    with pytest.raises(ValueError, match=r"'é' at position 7 "):
        CHAR.encode("<bos>ab\u00e9")
    with pytest.raises(ValueError, match=r"'\\x0b' at position 1 "):
        CHAR.encode("a\x0b")


def test_char_vocab_padding():
    tok = tk.CharTokenizer("0123456789", vocab_size=64)
    assert tok.vocab_size == 64
    assert tok.decode([5, 20, 63, 6]) == "01"
    assert tok.decode([5, 63], skip_special_tokens=False) == "0<unused63>"
    assert tok.token_to_id("<unused20>") == 20 and tok.token_to_id("<unused14>") is None
    with pytest.raises(ValueError, match="vocab_size=14 is below the natural size 15"):
        tk.CharTokenizer("0123456789", vocab_size=14)


# ----- shared behaviour and errors -----


def test_decode_rejects_bad_ids():
    with pytest.raises(ValueError, match="token id 103 at position 1"):
        CHAR.decode([5, 103])
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        CHAR.decode(np.array([-1, 5]))
    with pytest.raises(ValueError, match="1-D"):
        CHAR.decode(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="token id 500"):
        CHAR.id_to_token(500)
    assert CHAR.decode([]) == ""


def test_chat_template_errors():
    with pytest.raises(ValueError, match="role 'bot'.*valid roles"):
        CHAR.apply_chat_template([{"role": "bot", "content": "hi"}])
    with pytest.raises(ValueError, match="already start with a system"):
        CHAR.apply_chat_template([{"role": "system", "content": "a"}], system="b")
    with pytest.raises(ValueError, match="content must be a str"):
        CHAR.apply_chat_template([{"role": "user", "content": None}])
    tool = CHAR.apply_chat_template([{"role": "tool", "content": "4"}], add_generation_prompt=False)
    assert tool == "<|im_start|>tool\n4<|im_end|>\n"


def test_load_errors_name_the_path(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match=re.escape(f"does not exist: {missing}")):
        tk.load_tokenizer(missing)
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"{tmp_path}: looked for tokenizer.json")
    ):
        tk.load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(
        ValueError, match=re.escape(f"cannot read Hugging Face tokenizer {tmp_path}")
    ):
        tk.load_tokenizer(tmp_path)
    (tmp_path / "bad.model").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="cannot read sentencepiece model .*bad\\.model"):
        tk.load_tokenizer(tmp_path / "bad.model")
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"unrecognised tokenizer file .*vocab\.txt"):
        tk.load_tokenizer(tmp_path / "vocab.txt")


def test_corrupt_config_names_the_file(hf_dir, tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    (tmp_path / "generation_config.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"generation_config\.json"):
        tk.load_tokenizer(tmp_path)
