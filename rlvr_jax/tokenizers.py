"""One tokenizer interface over sentencepiece, Hugging Face and toy character vocabularies.

Samplers, tasks and verifiers take a `Tokenizer` and never see which library is behind
it. `sentencepiece`/`tokenizers` are imported in the constructors, so importing this
module is cheap. Chat prompts are always plain ChatML (the format of the Qwen
checkpoints this codebase targets); a checkpoint's own Jinja template is not executed.
"""

from __future__ import annotations

import abc
import itertools
import json
import os
import re
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CHAT_ROLES = ("system", "user", "assistant", "tool")
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Tokens that end a turn in common chat vocabularies; any present becomes a stop id.
END_OF_TURN_TOKENS = (IM_END, "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")


class Tokenizer(abc.ABC):
    """Text <-> token ids, special ids and ChatML rendering.

    Subclasses set the ids below in their constructor and implement the four backend
    hooks; this base class adds id checking, BOS/EOS handling, stop ids and chat
    rendering once for all of them.
    """

    _vocab_size: int
    _bos: int | None
    _eos: int | None
    _pad: int | None
    _extra_stops: tuple[int, ...] = ()  # e.g. EOS ids from generation_config.json.

    @abc.abstractmethod
    def _encode(self, text: str) -> list[int]:
        """Ids of `text` without any special tokens added."""

    @abc.abstractmethod
    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        """Text of in-range `ids`."""

    @abc.abstractmethod
    def _id_to_token(self, i: int) -> str:
        """Piece string of an in-range id."""

    @abc.abstractmethod
    def token_to_id(self, piece: str) -> int | None:
        """Id of the vocabulary entry spelled exactly `piece`, or None if there is none."""

    @property
    def vocab_size(self) -> int:
        """Number of ids; valid ids are 0..vocab_size-1."""
        return self._vocab_size

    @property
    def bos_id(self) -> int | None:
        """Beginning-of-sequence id, or None if the vocabulary has none."""
        return self._bos

    @property
    def eos_id(self) -> int | None:
        """End-of-sequence id, or None if the vocabulary has none."""
        return self._eos

    @property
    def pad_id(self) -> int | None:
        """Padding id: the vocabulary's pad id, else `eos_id` (padding is always masked,
        so reusing EOS is harmless and saves callers a None check), else None."""
        return self._pad if self._pad is not None else self._eos

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a generation: EOS, chat end-of-turn tokens present in the
        vocabulary (`<|im_end|>`, `<|endoftext|>`, ...) and backend extras, deduplicated
        in that order."""
        ids = [] if self._eos is None else [self._eos]
        ids += [i for t in END_OF_TURN_TOKENS if (i := self.token_to_id(t)) is not None]
        return tuple(dict.fromkeys([*ids, *self._extra_stops]))

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Tokenizes text.

        Args:
          text: the string to encode.
          add_bos: prepend `bos_id`.
          add_eos: append `eos_id`.

        Returns:
          The token ids, list of length T. ValueError if a requested BOS/EOS is missing.
        """
        ids = self._encode(text)
        if add_bos:
            if self.bos_id is None:
                raise ValueError(f"add_bos=True but {type(self).__name__} has no BOS token")
            ids = [self.bos_id, *ids]
        if add_eos:
            if self.eos_id is None:
                raise ValueError(f"add_eos=True but {type(self).__name__} has no EOS token")
            ids = [*ids, self.eos_id]
        return ids

    def decode(self, ids: Sequence[int] | np.ndarray, *, skip_special_tokens: bool = True) -> str:
        """Turns ids back into text.

        Args:
          ids: token ids, a list or a 1-D integer array of shape [T].
          skip_special_tokens: drop special tokens (BOS, EOS, pad, chat markers, ...)
            instead of rendering their piece strings.

        Returns:
          The decoded text. ValueError, naming the id, if an id is outside [0, vocab_size).
        """
        return self._decode(self._check_ids(ids), skip_special_tokens)

    def id_to_token(self, i: int) -> str:
        """Returns the vocabulary entry (e.g. "▁the", "Ġthe", "<|im_end|>") of id `i`."""
        return self._id_to_token(self._check_ids([i])[0])

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        system: str | None = None,
    ) -> str:
        """Renders messages as ChatML text.

        Each message becomes `<|im_start|>{role}\\n{content}<|im_end|>\\n`. No default
        system prompt is inserted, and tool messages use their own `tool` role.

        Args:
          messages: dicts with "role" (system/user/assistant/tool) and "content" (str).
          add_generation_prompt: end with `<|im_start|>assistant\\n` so the model answers.
          system: optional system prompt, rendered first; the messages must then not
            start with their own system message.

        Returns:
          The prompt string. ValueError on an unknown role, non-str content, or two
          system prompts.
        """
        if system is not None:
            if messages and messages[0].get("role") == "system":
                raise ValueError("system= given but messages already start with a system message")
            messages = [{"role": "system", "content": system}, *messages]
        parts = []
        for k, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            if role not in CHAT_ROLES:
                raise ValueError(f"message {k} has role {role!r}; valid roles: {CHAT_ROLES}")
            if not isinstance(content, str):
                raise ValueError(f"message {k} content must be a str, got {type(content).__name__}")
            parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
        if add_generation_prompt:
            parts.append(f"{IM_START}assistant\n")
        return "".join(parts)

    def encode_chat(
        self,
        messages: list[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        system: str | None = None,
        add_bos: bool = False,
    ) -> list[int]:
        """`encode(apply_chat_template(...))`; see those methods for the arguments.

        Returns:
          The prompt's token ids, list of length T.
        """
        text = self.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, system=system
        )
        return self.encode(text, add_bos=add_bos)

    def _check_ids(self, ids: Sequence[int] | np.ndarray) -> list[int]:
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"expected a 1-D sequence of token ids, got shape {arr.shape}")
        if arr.size == 0:
            return []
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
        bad = (arr < 0) | (arr >= self.vocab_size)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"token id {arr[k]} at position {k} is outside [0, {self.vocab_size})")
        return arr.tolist()


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece `.model` file; BOS/EOS/pad come from the model's trainer spec.

    Special tokens (skipped by `decode`) are the model's control pieces (BOS, EOS, pad);
    user-defined pieces are ordinary text, as sentencepiece itself treats them.

    Args:
      path: path to a sentencepiece `.model` file.
    """

    def __init__(self, path: str | os.PathLike):
        import sentencepiece as spm  # Lazy: optional dependency.

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"sentencepiece model file not found: {self.path}")
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(self.path))
        except (RuntimeError, OSError) as e:
            raise ValueError(f"cannot read sentencepiece model {self.path}: {e}") from e
        self._vocab_size = self._sp.get_piece_size()
        # sentencepiece reports a missing special token as -1.
        specials = (self._sp.bos_id(), self._sp.eos_id(), self._sp.pad_id())
        self._bos, self._eos, self._pad = (None if i < 0 else i for i in specials)

    def _encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text, out_type=int))

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        if skip_special_tokens:
            return self._sp.decode([i for i in ids if not self._sp.is_control(i)])
        # sentencepiece always drops control pieces, so render them between decoded runs.
        return "".join(
            "".join(map(self._sp.id_to_piece, run)) if control else self._sp.decode(list(run))
            for control, run in itertools.groupby(ids, self._sp.is_control)
        )

    def _id_to_token(self, i: int) -> str:
        return self._sp.id_to_piece(i)

    def token_to_id(self, piece: str) -> int | None:
        # piece_to_id maps every unknown piece to the unk id; check it round-trips.
        i = self._sp.piece_to_id(piece)
        return int(i) if self._sp.id_to_piece(i) == piece else None


def _read_json(path: Path) -> dict[str, Any] | None:
    """Parsed JSON object at `path`, None if absent, ValueError naming the file if corrupt."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot parse JSON file {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object in {path}, got {type(data).__name__}")
    return data


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizer.json` (package `tokenizers`), plus its sibling configs.

    Special tokens come from `tokenizer_config.json`, overridden by
    `special_tokens_map.json` where it names one (transformers' precedence). EOS ids in
    `generation_config.json` become extra stop ids. `encode` never applies the
    tokenizer's post-processor: BOS/EOS are added only through add_bos/add_eos. `decode`
    does not clean up tokenization spaces.

    Args:
      path: a `tokenizer.json` file or a directory containing one; the optional config
        files are read from the same directory.
    """

    def __init__(self, path: str | os.PathLike):
        from tokenizers import Tokenizer as _HFBackend  # Lazy: optional dependency.

        path = Path(path)
        self.path = path / "tokenizer.json" if path.is_dir() else path
        if not self.path.is_file():
            raise FileNotFoundError(f"Hugging Face tokenizer file not found: {self.path}")
        try:
            self._tok = _HFBackend.from_file(str(self.path))
        except Exception as e:  # tokenizers raises a bare Exception on parse errors.
            raise ValueError(f"cannot read Hugging Face tokenizer {self.path}: {e}") from e
        # Added tokens may leave gaps in the id space, so size by the largest id.
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self._vocab_size = max(vocab.values()) + 1 if vocab else 0

        folder = self.path.parent
        config = _read_json(folder / "tokenizer_config.json") or {}
        special_map = _read_json(folder / "special_tokens_map.json") or {}
        self._bos, self._eos, self._pad = (
            self._special_id(special_map[k], k, folder / "special_tokens_map.json")
            if special_map.get(k)
            else self._special_id(config.get(k), k, folder / "tokenizer_config.json")
            for k in ("bos_token", "eos_token", "pad_token")
        )

        gen_path = folder / "generation_config.json"
        eos = (_read_json(gen_path) or {}).get("eos_token_id")
        eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
        if not all(isinstance(i, int) and 0 <= i < self._vocab_size for i in eos):
            raise ValueError(
                f"bad eos_token_id {eos} in {gen_path} (vocab size {self._vocab_size})"
            )
        self._extra_stops = tuple(eos)

    def _special_id(self, value: Any, key: str, source: Path) -> int | None:
        # Configs store a token either as a string or as an AddedToken dict.
        if isinstance(value, dict):
            value = value.get("content")
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"{key} in {source} must be a string or a dict with 'content'")
        i = self._tok.token_to_id(value)
        if i is None:
            raise ValueError(f"{key} {value!r} from {source} is not in the vocabulary")
        return i

    def _encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def _id_to_token(self, i: int) -> str:
        piece = self._tok.id_to_token(i)
        if piece is None:
            raise ValueError(f"token id {i} has no entry in {self.path}")
        return piece

    def token_to_id(self, piece: str) -> int | None:
        return self._tok.token_to_id(piece)


class CharTokenizer(Tokenizer):
    """A deterministic character-level tokenizer for tests and toy tasks.

    Ids: `<pad>`=0, `<bos>`=1, `<eos>`=2, `<|im_start|>`=3, `<|im_end|>`=4, then one id
    per alphabet character, then unused padding ids `<unused{i}>` up to `vocab_size`.
    `encode` reads the five special strings inside text as their ids, so a rendered chat
    template round-trips; the literal text "<bos>" therefore cannot be spelled by
    characters. Special and unused ids are skipped by `decode(skip_special_tokens=True)`.

    Args:
      alphabet: characters to give ids to, in order (duplicates dropped); defaults to
        `string.printable` without vertical tab and form feed.
      vocab_size: pad the vocabulary with unused ids up to this size (models often round
        the vocab to a multiple of 64); must be >= the natural size, else ValueError.
    """

    SPECIALS = ("<pad>", "<bos>", "<eos>", IM_START, IM_END)
    DEFAULT_ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "")

    def __init__(self, alphabet: str | Sequence[str] | None = None, vocab_size: int | None = None):
        chars = list(dict.fromkeys(self.DEFAULT_ALPHABET if alphabet is None else alphabet))
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("alphabet entries must be single characters")
        natural = len(self.SPECIALS) + len(chars)
        if vocab_size is not None and vocab_size < natural:
            raise ValueError(f"vocab_size={vocab_size} is below the natural size {natural}")
        n = natural if vocab_size is None else vocab_size
        self._pieces = [*self.SPECIALS, *chars, *(f"<unused{i}>" for i in range(natural, n))]
        self._ids = {p: i for i, p in enumerate(self._pieces)}
        self._n_special = len(self.SPECIALS)
        self._n_natural = natural
        self._vocab_size, self._bos, self._eos, self._pad = n, 1, 2, 0
        self._special_re = re.compile("(" + "|".join(map(re.escape, self.SPECIALS)) + ")")

    def _encode(self, text: str) -> list[int]:
        ids, pos = [], 0
        # Splitting with a capture group keeps the special strings as odd-index parts.
        for k, part in enumerate(self._special_re.split(text)):
            if k % 2:
                ids.append(self._ids[part])
            else:
                for j, ch in enumerate(part):
                    if (i := self._ids.get(ch)) is None:
                        msg = f"character {ch!r} at position {pos + j} is not in the alphabet"
                        raise ValueError(msg)
                    ids.append(i)
            pos += len(part)
        return ids

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        if skip_special_tokens:
            ids = [i for i in ids if self._n_special <= i < self._n_natural]
        return "".join(self._pieces[i] for i in ids)

    def _id_to_token(self, i: int) -> str:
        return self._pieces[i]

    def token_to_id(self, piece: str) -> int | None:
        return self._ids.get(piece)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Opens the tokenizer at `path`, choosing the backend from what is there.

    Args:
      path: a sentencepiece `.model` file, a Hugging Face `tokenizer.json` file, or a
        checkpoint directory holding `tokenizer.json` (preferred) or `tokenizer.model`.

    Returns:
      A `HFTokenizer` or `SentencePieceTokenizer`.

    Raises:
      FileNotFoundError: the path does not exist or the directory has no tokenizer file.
      ValueError: the file type is not recognised or the file is corrupt.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return HFTokenizer(path / "tokenizer.json")
        if (path / "tokenizer.model").is_file():
            return SentencePieceTokenizer(path / "tokenizer.model")
        raise FileNotFoundError(
            f"no tokenizer in directory {path}: looked for tokenizer.json and tokenizer.model"
        )
    if not path.exists():
        raise FileNotFoundError(f"tokenizer path does not exist: {path}")
    if path.suffix == ".model":
        return SentencePieceTokenizer(path)
    if path.suffix == ".json":
        return HFTokenizer(path)
    raise ValueError(
        f"unrecognised tokenizer file {path}: expected a sentencepiece .model file or a "
        "Hugging Face tokenizer.json"
    )


# -------------------------------------------------------------------- chat turns
def end_of_turn_id(tokenizer: Tokenizer) -> int:
    """The token closing an assistant turn: `<|im_end|>` if the vocabulary has it, else EOS."""
    i = tokenizer.token_to_id(IM_END)
    if i is None:
        i = tokenizer.eos_id
    if i is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither {IM_END} nor an EOS token")
    return i


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """A user prompt rendered with the chat template, ending with the assistant header."""
    return tokenizer.encode_chat([{"role": "user", "content": prompt}])


def cut_at_stop(ids: Sequence[int], stop_ids: Sequence[int]) -> list[int]:
    """`ids` up to (not including) the first stop token."""
    for j, t in enumerate(ids):
        if t in stop_ids:
            return list(ids[:j])
    return list(ids)
