"""The warm-start models' tokenizer: the default one, its fingerprint, and saving it with a model.

By default the shipped sentencepiece model (`rlvr_jax/assets/rlvr_tasks_sp.model`)
if present, else the 128-id character tokenizer of `rlvr_jax.testing`. The
fingerprint (backend and full vocabulary) is part of a warm-start model's cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from rlvr_jax.tokenizers import (
    CharTokenizer,
    HFTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    load_tokenizer,
)

_CHAR_TOKENIZER_FILE = "char_tokenizer.json"


def default_tokenizer() -> Tokenizer:
    """The shipped sentencepiece task tokenizer if its file exists, else a char tokenizer."""
    from rlvr_jax.data import vocab  # Lazy: pulls in the data pipeline.

    if vocab.DEFAULT_TOKENIZER_PATH.is_file():
        return vocab.default_tokenizer()
    return CharTokenizer(vocab_size=128)


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A hash of the tokenizer's backend and full vocabulary (id -> piece)."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    for i in range(tokenizer.vocab_size):
        h.update(tokenizer.id_to_token(i).encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> None:
    """Copies the tokenizer file into model directory `path` (see `load_model_tokenizer`)."""
    path = Path(path)
    if isinstance(tokenizer, SentencePieceTokenizer):
        shutil.copyfile(tokenizer.path, path / "tokenizer.model")
    elif isinstance(tokenizer, HFTokenizer):
        shutil.copyfile(tokenizer.path, path / "tokenizer.json")
    elif isinstance(tokenizer, CharTokenizer):
        n = len(CharTokenizer.SPECIALS)
        pieces = [tokenizer.id_to_token(i) for i in range(n, tokenizer.vocab_size)]
        alphabet = [p for p in pieces if len(p) == 1]
        spec = {"alphabet": alphabet, "vocab_size": tokenizer.vocab_size}
        (path / _CHAR_TOKENIZER_FILE).write_text(json.dumps(spec))
    else:
        raise ValueError(f"cannot save a {type(tokenizer).__name__}")


def load_model_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """The tokenizer saved next to a warm-start model by `save_tokenizer`."""
    char_file = Path(path) / _CHAR_TOKENIZER_FILE
    if char_file.is_file():
        spec = json.loads(char_file.read_text())
        return CharTokenizer(alphabet=spec["alphabet"], vocab_size=spec["vocab_size"])
    return load_tokenizer(path)
