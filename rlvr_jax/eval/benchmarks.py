"""The paper benchmarks: where their files are in a data directory and how rows become items.

Each `Benchmark` names the directories (under the user's data directory) its
Hugging Face release is looked for in, the file names it reads there (searched
recursively, so a `huggingface-cli download` snapshot with `data/test-*.parquet`
works as is), and a row mapper using the release's field names. Field names are
tried in order, so the common re-uploads of one benchmark (HuggingFaceH4/aime_2024
with `problem`, Maxwell-Jia/AIME_2024 with `Problem`) load alike. Nothing is
downloaded. Code benchmarks are in `code_benchmarks.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable
from pathlib import Path

from rlvr_jax.eval.items import LETTERS, Item
from rlvr_jax.eval.rows import SUFFIXES, BadRow, field, load_items, text_field
from rlvr_jax.tasks.base import extract_answer
from rlvr_jax.tasks.math_answers import strip_wrappers


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark of a suite.

    Attributes:
      name: the key used in tables, caches and `--benchmarks` (e.g. "math500").
      title: the column heading papers use (e.g. "MATH-500").
      kind: "math", "choice" or "code".
      dirs: directory names under the data directory holding the release's files;
        a file `<data>/<dir><suffix>` directly in the data directory counts too.
      pattern: glob of the file names read inside those directories.
      to_item: (row, where, seed) -> Item; raises BadRow naming the field.
      loose: glob of files read directly in the data directory (e.g. GPQA's
        "gpqa_diamond*.csv"); "" for none.
    """

    name: str
    title: str
    kind: str
    dirs: tuple[str, ...]
    pattern: str
    to_item: Callable[[dict, str, int], Item]
    loose: str = ""

    def files(self, data_dir: Path) -> list[Path]:
        """The release files of this benchmark under `data_dir` (sorted; [] when absent)."""
        data_dir = Path(data_dir)
        found: list[Path] = []
        for d in self.dirs:
            found += [data_dir / f"{d}{s}" for s in SUFFIXES if (data_dir / f"{d}{s}").is_file()]
            if (data_dir / d).is_dir():
                # Hidden paths hold a hub snapshot's .cache/ metadata, never rows.
                found += sorted(
                    p
                    for p in (data_dir / d).rglob(self.pattern)
                    if p.is_file()
                    and p.suffix.lower() in SUFFIXES
                    and not any(part.startswith(".") for part in p.relative_to(data_dir).parts)
                )
        if self.loose:
            found += sorted(
                p for p in data_dir.glob(self.loose) if p.is_file() and p.suffix.lower() in SUFFIXES
            )
        return list(dict.fromkeys(found))

    def load(self, data_dir: Path, *, seed: int = 0, on_bad_row: str = "raise"):
        """(items, rows skipped) of this benchmark; FileNotFoundError saying where it looked.

        Args:
          data_dir: the user's benchmark directory.
          seed: fixes GPQA's option order (the same seed, the same letters).
          on_bad_row: "raise" or "skip" (see `rows.load_items`).
        """
        paths = self.files(data_dir)
        if not paths:
            raise FileNotFoundError(self.missing_message(data_dir))
        items, skipped = load_items(
            paths, lambda row, where: self.to_item(row, where, seed), on_bad_row=on_bad_row
        )
        seen: dict[str, int] = {}
        for item in items:
            seen[item.id] = seen.get(item.id, 0) + 1
        dup = [i for i, c in seen.items() if c > 1]
        if dup:
            raise BadRow(f"{self.name}: problem ids repeat across {paths}: {dup[:5]}")
        return items, skipped

    def missing_message(self, data_dir: Path) -> str:
        where = ", ".join(f"{d}/**/{self.pattern}" for d in self.dirs)
        return (
            f"{self.name}: no {'/'.join(SUFFIXES)} file under {data_dir} (looked for "
            f"{where} and {self.dirs[0]}.<suffix>)"
        )


# ---------------------------------------------------------------- math

_ID = ("id", "ID", "unique_id", "problem_idx", "idx", "question_id")
_QUESTION = ("problem", "Problem", "question", "Question")
_ANSWER = ("answer", "Answer", "final_answer", "gt", "expected_answer")


def _gold(text: str) -> str:
    """A reference answer without $...$ and with a stored \\boxed{} unwrapped."""
    if "\\boxed{" in text:
        text = extract_answer(text) or text
    return strip_wrappers(text)


def _row_id(row: dict, where: str) -> str:
    """The release's id of a row, else its location ("aime2025-I.jsonl:line-3"): unique per file."""
    value = field(row, _ID, required=False)
    return where.replace(" ", "-") if value is None else str(value)


def math_item(row: dict, where: str, seed: int) -> Item:
    """AIME/AMC/MATH-500/Minerva/OlympiadBench row: problem + final answer.

    OlympiadBench's `final_answer` is a list (several answers when
    `is_multiple_answer`): they are joined by ", " as its own scorer compares them.
    A release with only a worked `solution` gives the solution's last \\boxed{}.
    """
    del seed
    question = text_field(row, _QUESTION)
    answer = field(row, _ANSWER, required=False)
    if isinstance(answer, (list, tuple)):
        parts = [strip_wrappers(str(a)) for a in answer if str(a).strip()]
        if not parts:
            raise BadRow("field 'final_answer' is an empty list")
        answer = ", ".join(parts)
    elif answer is not None:
        answer = text_field(row, _ANSWER)
    else:
        solution = text_field(row, ("solution",), required=False)
        answer = extract_answer(solution) if solution else None
        if not answer:
            raise BadRow(
                f"missing field {' or '.join(map(repr, _ANSWER))} (has {sorted(row)[:20]})"
            )
    gold = _gold(answer)
    if not gold:
        raise BadRow("the reference answer is empty after unwrapping")
    keep = ("level", "subject", "type", "year", "url", "subfield", "answer_type", "unit")
    meta = {k: row[k] for k in keep if isinstance(row.get(k), (str, int, float))}
    return Item(id=_row_id(row, where), kind="math", body=question, answer=gold, metadata=meta)


# ---------------------------------------------------------------- multiple choice


def choice_body(question: str, options: tuple[str, ...]) -> str:
    """The question followed by one "X) option" line per option."""
    lines = [f"{LETTERS[i]}) {o}" for i, o in enumerate(options)]
    return question + "\n\n" + "\n".join(lines)


def shuffled_order(key: str, n: int, seed: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, key): independent of file order and process."""
    digest = hashlib.sha256(f"{seed}|{key}".encode()).digest()
    order = list(range(n))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def gpqa_item(row: dict, where: str, seed: int) -> Item:
    """Idavidrein/gpqa csv row: Question, Correct Answer, Incorrect Answer 1-3, Record ID.

    The release lists the correct answer first; the options are shown in an order
    shuffled by (seed, Record ID), so the letter of the answer is fixed per seed.
    """
    question = text_field(row, ("Question",))
    correct = text_field(row, ("Correct Answer",))
    wrong = [text_field(row, (f"Incorrect Answer {i}",)) for i in (1, 2, 3)]
    rid = text_field(row, ("Record ID",), required=False) or where.replace(" ", "-")
    texts = [correct, *wrong]
    order = shuffled_order(rid, 4, seed)
    options = tuple(texts[j] for j in order)
    letter = LETTERS[order.index(0)]
    meta = {k: row[k] for k in ("Subdomain", "High-level domain") if row.get(k)}
    return Item(rid, "choice", choice_body(question, options), letter, options, metadata=meta)


def mmlu_pro_item(row: dict, where: str, seed: int) -> Item:
    """TIGER-Lab/MMLU-Pro row: question_id, question, options (list), answer, answer_index."""
    del seed
    question = text_field(row, ("question",))
    options = field(row, ("options",))
    if not isinstance(options, (list, tuple)) or not 2 <= len(options) <= len(LETTERS):
        raise BadRow(f"field 'options' must be a list of 2-{len(LETTERS)} strings")
    options = tuple(str(o).strip() for o in options)
    letter = text_field(row, ("answer",)).upper()
    index = field(row, ("answer_index",), required=False)
    if letter not in LETTERS[: len(options)]:
        raise BadRow(f"field 'answer' is {letter!r}, not one of the {len(options)} option letters")
    if index is not None and LETTERS[int(index)] != letter:
        raise BadRow(f"field 'answer_index' {index} disagrees with field 'answer' {letter!r}")
    meta = {k: row[k] for k in ("category", "src") if row.get(k)}
    rid = _row_id(row, where)
    return Item(rid, "choice", choice_body(question, options), letter, options, metadata=meta)


def _b(name, title, kind, dirs, pattern, to_item, loose=""):
    return Benchmark(name, title, kind, tuple(dirs.split()), pattern, to_item, loose)


MATH_BENCHMARKS = (
    _b("aime24", "AIME24", "math", "aime24 aime_2024 AIME_2024 aime2024", "*", math_item),
    _b("aime25", "AIME25", "math", "aime25 aime_2025 AIME2025 aime2025", "*", math_item),
    _b("amc23", "AMC23", "math", "amc23 amc_2023 AMC23", "*", math_item),
    _b("math500", "MATH-500", "math", "math500 MATH-500 math_500", "*", math_item),
    _b("minerva", "Minerva", "math", "minerva minervamath minerva_math", "*", math_item),
    _b(
        "olympiadbench",
        "OlympiadBench",
        "math",
        "olympiadbench OlympiadBench olympiad_bench",
        "*",
        math_item,
    ),
)
SCIENCE_BENCHMARKS = (
    _b("gpqa_diamond", "GPQA-Diamond", "choice", "gpqa_diamond gpqa", "gpqa_diamond*", gpqa_item,
       "gpqa_diamond*"),
    _b("mmlu_pro", "MMLU-Pro", "choice", "mmlu_pro MMLU-Pro mmlu-pro", "test*", mmlu_pro_item),
)  # fmt: skip
