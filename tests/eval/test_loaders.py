"""Each benchmark's loader on its fixture file, and the errors malformed files and rows give."""

from __future__ import annotations

import base64
import json
import logging
import pickle
import zlib
from pathlib import Path

import pytest

from rlvr_jax.eval import SUITES, BadRow, Settings, get_suite, load_suite_items
from rlvr_jax.eval.benchmarks import shuffled_order
from rlvr_jax.eval.code_benchmarks import decode_private_tests
from rlvr_jax.eval.items import CodeTest

DATA = Path(__file__).resolve().parent / "fixtures" / "data"


def _load(name: str, data=DATA, **kw):
    suite = next(s for s in SUITES.values() if name in [b.name for b in s.benchmarks])
    return suite.benchmark(name).load(data, **kw)


@pytest.mark.parametrize(
    "name, count, first_id, first_answer",
    [
        ("aime24", 3, "60", "12"),  # parquet, int64 id
        ("aime25", 3, "aime2025-I.jsonl:line-1", "55"),  # no ids: file and line name it
        ("amc23", 2, "0", "0.8333333333"),
        ("math500", 3, "test/algebra/901.json", "5\\sqrt{2}"),
        ("minerva", 2, "test.jsonl:line-1", "20"),
        ("olympiadbench", 2, "2001", "3, -3"),  # final_answer list, $...$ stripped, joined
    ],
)
def test_math_loaders_map_release_fields(name, count, first_id, first_answer):
    items, skipped = _load(name)
    assert skipped == 0 and len(items) == count
    assert (items[0].id, items[0].answer, items[0].kind) == (first_id, first_answer, "math")
    assert items[0].body and "\\boxed" not in items[0].body


def test_amc_float_answer_of_an_integer_reads_as_the_integer():
    items, _ = _load("amc23")
    assert items[1].answer == "81"  # stored as 81.0 in the release's float column


def test_gpqa_options_are_shuffled_by_seed_and_the_letter_follows_the_correct_answer():
    for seed in (0, 1, 2):
        items, _ = _load("gpqa_diamond", seed=seed)
        first = items[0]
        assert sorted(first.options) == sorted(["electron", "proton", "neutron", "photon"])
        assert first.options["ABCD".index(first.answer)] == "electron"
        assert f"{first.answer}) electron" in first.body
    orders = {tuple(shuffled_order("recFIX0001", 4, s)) for s in range(8)}
    assert len(orders) > 1  # the seed changes the order
    assert shuffled_order("recFIX0001", 4, 3) == shuffled_order("recFIX0001", 4, 3)


def test_mmlu_pro_reads_the_test_split_only_and_checks_answer_index():
    items, _ = _load("mmlu_pro")
    assert [i.id for i in items] == ["70001", "70002"]  # validation-*.parquet not read
    assert items[0].answer == "C" and items[0].options[2] == "7" and len(items[0].options) == 10
    assert "J) 16" in items[0].body


def test_livecodebench_decodes_public_and_pickled_private_tests():
    items, _ = _load("livecodebench")
    a, b = items
    assert a.tests == (CodeTest(stdin="1 2\n", expected_stdout="3\n"),
                       CodeTest(stdin="10 20\n", expected_stdout="30\n"))  # fmt: skip
    assert len(b.tests) == 2 and "Solution().double(*_args)" in b.tests[0].assertion
    assert "class Solution" in b.body and a.metadata["platform"] == "atcoder"


def test_private_tests_pickle_with_a_global_is_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    packed = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(BadRow, match="private_test_cases.*refusing global"):
        decode_private_tests(packed)
    plain = [{"input": "1", "output": "2", "testtype": "stdin"}]
    assert decode_private_tests(json.dumps(plain)) == plain


def test_evalplus_loaders():
    (he, _), (mb, _) = _load("humanevalplus")[0], _load("mbppplus")[0]
    assert he.id == "HumanEval/900" and he.entry_point == "add"
    assert he.tests[0].assertion.endswith("check(add)")
    assert he.program_prefix.endswith('"""Return a + b."""\n')
    assert mb.id == "9001" and len(mb.tests) == 3  # 2 asserts of test_list + the plus script


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_missing_field_names_file_line_and_field(tmp_path):
    path = _write(
        tmp_path / "math500" / "test.jsonl",
        '{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "solution": "four"}\n',
    )
    with pytest.raises(BadRow) as e:
        _load("math500", tmp_path)
    assert str(path) in str(e.value) and "line 2" in str(e.value) and "'answer'" in str(e.value)


def test_invalid_json_line_and_skip_mode_counts_and_logs(tmp_path, caplog):
    _write(tmp_path / "aime25.jsonl", '{"question": "q1", "answer": "1"}\n{not json\n'
           '{"question": "q3", "answer": ""}\n{"question": "q4", "answer": 4}\n')  # fmt: skip
    with pytest.raises(BadRow, match=r"aime25.jsonl, line 2: invalid JSON"):
        _load("aime25", tmp_path)
    with caplog.at_level(logging.WARNING):
        items, skipped = _load("aime25", tmp_path, on_bad_row="skip")
    assert [i.answer for i in items] == ["1", "4"] and skipped == 2
    assert "skipped 2 malformed rows of 4" in caplog.text


def test_bad_csv_and_parquet_rows_name_the_row(tmp_path):
    _write(
        tmp_path / "gpqa" / "gpqa_diamond.csv",
        "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Record ID\nq,a,b,c,r1\n",
    )
    with pytest.raises(
        BadRow, match=r"gpqa_diamond.csv, row 0: missing field 'Incorrect Answer 3'"
    ):
        _load("gpqa_diamond", tmp_path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "mmlu_pro").mkdir()
    rows = [
        {"question_id": 1, "question": "q", "options": ["x", "y"], "answer": "B", "answer_index": 0}
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mmlu_pro" / "test.parquet")
    with pytest.raises(BadRow, match=r"test.parquet, row 0: field 'answer_index' 0 disagrees"):
        _load("mmlu_pro", tmp_path)


def test_suite_loading_leaves_out_absent_benchmarks_and_names_what_it_looked_for(tmp_path):
    loaded, missing = load_suite_items(get_suite("science"), DATA, Settings(num_problems=1))
    assert [b.name for b, _, _ in loaded] == ["gpqa_diamond", "mmlu_pro"] and missing == []
    assert all(len(items) == 1 for _, items, _ in loaded)
    _write(tmp_path / "math500" / "test.jsonl", '{"problem": "1+1?", "answer": "2"}\n')
    loaded, missing = load_suite_items(get_suite("math"), tmp_path, Settings())
    assert [b.name for b, _, _ in loaded] == ["math500"] and "aime24" in missing
    with pytest.raises(FileNotFoundError, match="aime24: no .* file under"):
        load_suite_items(get_suite("math"), tmp_path, Settings(benchmarks=("aime24",)))
    with pytest.raises(FileNotFoundError, match="gpqa_diamond/\\*\\*/gpqa_diamond"):
        load_suite_items(get_suite("science"), tmp_path, Settings())
    with pytest.raises(ValueError, match="unknown suite 'maths'"):
        get_suite("maths")


def test_rows_without_ids_in_two_files_stay_distinct_and_hidden_files_are_not_read(tmp_path):
    """opencompass/AIME2025 ships aime2025-I.jsonl and aime2025-II.jsonl, neither with ids."""
    for part in ("I", "II"):
        _write(tmp_path / "aime25" / f"aime2025-{part}.jsonl", '{"question": "q", "answer": "1"}\n')
    _write(tmp_path / "aime25" / ".cache" / "huggingface" / "x.json", "not rows")
    items, _ = _load("aime25", tmp_path)
    assert [i.id for i in items] == ["aime2025-I.jsonl:line-1", "aime2025-II.jsonl:line-1"]


def test_a_value_of_the_wrong_type_is_reported_with_its_row(tmp_path):
    _write(tmp_path / "mmlu_pro" / "test.jsonl",
           '{"question_id": 1, "question": "q", "options": ["x", "y"], "answer": "A", '
           '"answer_index": "first"}\n')  # fmt: skip
    with pytest.raises(BadRow, match=r"test.jsonl, line 1: ValueError"):
        _load("mmlu_pro", tmp_path)
