"""JsonlSource on lines that break json itself (deep nesting, huge integers) and on answers
that are not answers (NaN, empty): each is a malformed record with its file and line, and
`on_error="skip"` skips it instead of aborting the load."""

import json

import pytest

from rlvr_jax.data import JsonlSource

GOOD = json.dumps({"prompt": "1+1?", "answer": "2"})
# Lines json.loads rejects with RecursionError / ValueError (int digit limit), not
# JSONDecodeError; and values it accepts that no verifier can use.
BAD = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge_int": '{"prompt": "p", "answer": ' + "9" * 5000 + "}",
    "nan": '{"prompt": "p", "answer": NaN}',
    "inf": '{"prompt": "p", "answer": -Infinity}',
    "empty": '{"prompt": "p", "answer": ""}',
    "blank": '{"prompt": "p", "answer": "   "}',
    "empty_prompt": '{"prompt": "", "answer": "3"}',
}
WHY = {
    "deep": "nested too deeply",
    "huge_int": "invalid JSON",
    "nan": "not a finite number",
    "inf": "not a finite number",
    "empty": "is empty",
    "blank": "is empty",
    "empty_prompt": "is empty",
}


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_line_raises_with_file_and_line(tmp_path, kind):
    path = _write(tmp_path / "d.jsonl", [GOOD, BAD[kind], GOOD])
    with pytest.raises(ValueError, match=rf"d\.jsonl, line 2: .*{WHY[kind]}"):
        JsonlSource(path)


def test_bad_lines_are_skipped_and_counted(tmp_path):
    kinds = sorted(BAD)
    path = _write(tmp_path / "d.jsonl", [GOOD] + [BAD[k] for k in kinds] + [GOOD])
    source = JsonlSource(path, on_error="skip")
    assert len(source) == 2 and source.num_skipped == len(kinds)
    assert [where for where, _ in source.skipped] == [
        f"{path}, line {i}" for i in range(2, 2 + len(kinds))
    ]
    assert [source[i]["id"] for i in range(2)] == ["d.jsonl:1", f"d.jsonl:{len(kinds) + 2}"]


def test_numbers_stay_accepted(tmp_path):
    lines = [json.dumps({"prompt": "p", "answer": a}) for a in (72, 0.5, -3, 10**20)]
    source = JsonlSource(_write(tmp_path / "n.jsonl", lines))
    assert [source[i]["answer"] for i in range(4)] == ["72", "0.5", "-3", str(10**20)]
