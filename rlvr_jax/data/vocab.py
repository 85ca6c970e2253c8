"""The shipped sentencepiece tokenizer of the synthetic tasks: its corpus and its training.

  tok = default_tokenizer()                      # rlvr_tasks_sp.model via load_tokenizer
  ids = tok.encode_chat([{"role": "user", "content": problem.prompt}])

The model is a byte-fallback BPE sentencepiece model trained on ChatML-rendered
prompts and reference solutions of every synthetic task (`CORPUS_TASKS`, train
split), built by `scripts/make_tokenizer.py` and shipped as
`rlvr_jax/assets/rlvr_tasks_sp.model` (~15 KB). Rebuilding with the defaults gives
a byte-identical file (tested; the check pins the sentencepiece version, 0.2.x).

Vocabulary (1024 ids by default):

  id         | piece                                      | kind
  0          | <pad>                                      | control (pad_id)
  1          | <unk>                                      | unknown (never produced)
  2          | <s>                                        | control (bos_id)
  3          | </s>                                       | control (eos_id)
  4, 5, 6, 7 | <|im_start|> <|im_end|> <|endoftext|> "\n" | user-defined: always one token
  8..263     | <0x00>..<0xFF>                             | byte fallback: any text encodes
  264..1023  | learned characters and BPE merges          | normal

`stop_ids` is (3, 5, 6): </s>, <|im_end|>, <|endoftext|>.

Choices, and why:
- BPE, not unigram: on this templated text, at vocab 1024, it gives fewer tokens
  on most tasks (countdown: 44 vs 50 per solution, 39 vs 64 per prompt; unigram
  only wins on number words), and its training draws no random numbers.
- `split_digits`: every digit is its own token, so multi-digit numbers are
  spelled digit by digit the same way everywhere, which tiny arithmetic models
  learn far more easily than arbitrary number chunks.
- Identity normalization, no dummy prefix, whitespace kept: `decode(encode(t)) == t`
  for every string without sentencepiece's own space mark "\u2581" (it decodes as a
  space). Control pieces in text ("<s>") are spelled as characters, never as ids.
- "\n" is a user-defined symbol, so no piece spans a line break: encoding text
  line by line gives the same ids as encoding it whole. Turn boundaries (a prompt
  ending in "assistant\n" | its response; a tool call line | the observation) and
  the step lines of arithmetic traces thus always fall on token boundaries.
- Determinism: one thread, every sentence used in corpus order (no sampling or
  shuffling), a fixed random seed, and the model serialised in memory, so no file
  path ends up in the proto.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

from rlvr_jax import tasks
from rlvr_jax.tokenizers import IM_END, IM_START, CharTokenizer, Tokenizer, load_tokenizer

DEFAULT_TOKENIZER_PATH = Path(__file__).resolve().parent.parent / "assets" / "rlvr_tasks_sp.model"
DEFAULT_VOCAB_SIZE = 1024
# Templated text saturates quickly: 200 problems per task already learn every merge
# that 500 do (same tokens per solution), and countdown's solver dominates build time.
DEFAULT_NUM_PER_TASK = 200
END_OF_TEXT = "<|endoftext|>"
# "\n" is its own symbol so that no piece spans a line break (module docstring).
USER_DEFINED_SYMBOLS = (IM_START, IM_END, END_OF_TEXT, "\n")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

# (task name, options) whose problems make up the corpus: every task at its default
# difficulty, the arithmetic in all four languages with digits and with number words,
# and the spy game with and without the spy knowing its role.
CORPUS_TASKS: tuple[tuple[str, dict], ...] = (
    ("countdown", {}),
    ("arithmetic", {}),
    *(
        ("multilingual_arithmetic", {"language": lang, "number_words": words})
        for lang in ("en", "es", "fr", "de")
        for words in (False, True)
    ),
    ("knights_knaves", {}),
    ("tool_lookup", {}),
    ("spy_describe", {}),
    ("spy_describe", {"spy_knows": True}),
    ("math_file", {}),  # the shipped sample file
)
# Tasks whose text is that of the tasks above (a mixture of domains; multilingual
# arithmetic with a language per problem): the corpus needs no entry of their own.
# `code` reads only the user's jsonl (no shipped sample), so it has none either.
# `code_synth` came after the shipped model: its Python text encodes through the
# byte fallback and the learned pieces (a reference solution is ~40 tokens), and
# adding it to the corpus would change the tokenizer every miniature base uses.
COMPOSED_TASKS = frozenset({"mixture", "multilingual_mix", "code", "code_synth"})

# ChatML rendering lives on the Tokenizer base class and does not depend on the
# vocabulary, so any instance renders exactly what every tokenizer renders.
_CHAT = CharTokenizer()


def render_example(prompt: str, response: str) -> str:
    """One training example as the sampler sees it: the ChatML prompt, the response, end.

    Args:
      prompt: the user message.
      response: the assistant's text.

    Returns:
      `apply_chat_template([user prompt]) + response + "<|im_end|>"`.
    """
    return _CHAT.apply_chat_template([{"role": "user", "content": prompt}]) + response + IM_END


def task_examples(task: tasks.Task, num: int, split: str = "train") -> list[str]:
    """Rendered examples of the first `num` problems of `task`'s `split`.

    Each problem gives its prompt with its reference solution; a spy_describe game
    also gives the describe turn of its voter. A file task with fewer problems gives
    all it has.

    Args:
      task: a task from `rlvr_jax.tasks.get`.
      num: problems to render.
      split: "train", "validation" or "test".

    Returns:
      The examples, each a string from `render_example`.
    """
    out = []
    for index in range(num):
        try:
            problem = task.problem(index, split)
        except IndexError:  # a file task ran out of records
            break
        out.append(render_example(problem.prompt, problem.solution))
        if task.name == "spy_describe":
            meta = problem.metadata
            out.append(render_example(meta["describe_prompt"], meta["describe_solution"]))
    return out


def task_corpus(num_per_task: int = DEFAULT_NUM_PER_TASK, seed: int = 0) -> list[str]:
    """The tokenizer's training text: `task_examples` of every `CORPUS_TASKS` entry.

    Args:
      num_per_task: train-split problems per entry of `CORPUS_TASKS`.
      seed: the task seed.

    Returns:
      The examples in a fixed order (deterministic in the arguments).
    """
    corpus = []
    for name, options in CORPUS_TASKS:
        corpus += task_examples(tasks.get(name, seed=seed, **options), num_per_task)
    return corpus


def train_sentencepiece(
    corpus: Sequence[str], *, vocab_size: int = DEFAULT_VOCAB_SIZE, seed: int = 0
) -> bytes:
    """Trains the byte-fallback BPE model (module docstring) on `corpus`, deterministically.

    Args:
      corpus: training texts; each may span several lines.
      vocab_size: total ids, specials and the 256 byte pieces included.
      seed: sentencepiece's random seed (BPE draws nothing, but it is fixed anyway).

    Returns:
      The serialised model proto; the same arguments give the same bytes.
    """
    import sentencepiece as spm  # Lazy: optional dependency.

    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=1.0,  # every character seen gets a piece; the rest go to bytes
        byte_fallback=True,
        split_digits=True,
        user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        max_sentence_length=1 << 16,  # bytes; longer examples would be dropped silently
        input_sentence_size=0,  # use every sentence, in order
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def train_tokenizer(
    output_path: str | os.PathLike = DEFAULT_TOKENIZER_PATH,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    num_per_task: int = DEFAULT_NUM_PER_TASK,
    seed: int = 0,
) -> Path:
    """Builds `task_corpus(num_per_task, seed)`, trains on it and writes the `.model` file.

    Args:
      output_path: where to write the model (parent folders are created).
      vocab_size: total ids (see `train_sentencepiece`).
      num_per_task: train-split problems per corpus task.
      seed: task seed and sentencepiece seed.

    Returns:
      The written path; the file is byte-identical for the same arguments.
    """
    model = train_sentencepiece(task_corpus(num_per_task, seed), vocab_size=vocab_size, seed=seed)
    path = Path(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model)
    os.replace(tmp, path)  # readers never see a half-written model
    return path


def default_tokenizer() -> Tokenizer:
    """The shipped task tokenizer, loaded through `load_tokenizer`."""
    return load_tokenizer(DEFAULT_TOKENIZER_PATH)
